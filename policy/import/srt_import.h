// sandbox-runtime (`srt`, anthropic-experimental/sandbox-runtime) settings -> a cordon policy.
#pragma once

#include <string>
#include <string_view>

#include "policy/import/import.h"

namespace cordon::policy::import {

// Maps `text` (an srt settings file, JSON) setting by setting: domains, filesystem read/write
// rules, the mandatory write protections srt always adds, and credentials it can express; every
// other key is listed in `unmapped`. Not settled (see settle()). Throws PolicyError naming
// `source` and the key path for invalid JSON, wrong types, nesting deeper than kMaxInputDepth.
ImportResult import_srt(std::string_view text, const std::string& source);

// The top-level and per-section keys of srt's schema: what detect_format() decides by.
bool is_srt_key(std::string_view section, std::string_view key);

}  // namespace cordon::policy::import
