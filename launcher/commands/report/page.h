// The report as one self-contained HTML file: the page template, its CSS and script (embedded in
// the binary at build time) and the session's data as an inert JSON block.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cordon::launcher::report {

// `j` as JSON that is safe inside <script type="application/json">: "<", ">" and "&" are written
// as \u003c, \u003e, \u0026 (no "</script>" or "<!--" can end or bend the block) and U+2028/2029
// as \u2028/\u2029 (JavaScript line terminators). Invalid UTF-8 becomes U+FFFD.
std::string script_safe_json(const nlohmann::json& j);

// The whole page. Its Content-Security-Policy allows only the page's own script and style (by
// SHA-256) and no fetch of any kind, so even markup that slipped in could neither run nor load.
std::string render_page(const nlohmann::json& model);

}  // namespace cordon::launcher::report
