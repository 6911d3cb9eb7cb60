// The names clouds give their instance metadata service, next to the addresses of
// IpAddress::is_metadata() (host_pattern.h).
#pragma once

#include <string_view>

namespace cordon::policy {

// Whether `host` (any case, a trailing dot ignored) is a metadata service's name
// ("metadata.google.internal", "instance-data.ec2.internal", ...). Off a cloud these names do not
// resolve, so the address check never sees them; a suggestion must not name them either.
bool is_metadata_name(std::string_view host);

}  // namespace cordon::policy
