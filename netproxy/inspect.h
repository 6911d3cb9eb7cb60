// TLS inspection of a decided connection: the sandbox's TLS ends here with a leaf from the
// inspection CA, the upstream's is verified against the host's trust store, and HTTP/1.1 runs
// between them one request at a time through request_hook.h.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <string>

#include "netproxy/context.h"

namespace cordon::netproxy {

struct Upstream;

// Serves the connection to its end and writes its net.connect. `leftover`: bytes of the client's
// TLS handshake already read (the transparent peek).
asio::awaitable<void> serve_inspected(Context& ctx, tcp::socket client, tcp::socket upstream,
                                      Upstream up, std::string leftover);

// Whether `up` (decided, about to be tunnelled) is to be inspected.
bool should_inspect(const Context& ctx, const Upstream& up);

}  // namespace cordon::netproxy
