// Shared connection context helpers.
#include "netproxy/context.h"

#include <spdlog/spdlog.h>

namespace cordon::netproxy {

void Context::emit(std::string_view kind, nlohmann::json fields) const {
  auto st = events.emit(kind, std::move(fields));
  if (!st.ok()) {
    spdlog::warn("cordon-netproxy: writing event {}: {}", kind, st.error().to_string());
  }
}

void Context::emit(const EventLine& line) const {
  auto st = line.write(events);
  if (!st.ok()) {
    spdlog::warn("cordon-netproxy: writing an event: {}", st.error().to_string());
  }
}

asio::ip::address to_asio(const policy::IpAddress& ip) {
  if (!ip.v6) {
    return asio::ip::address_v4(
        asio::ip::address_v4::bytes_type{ip.bytes[0], ip.bytes[1], ip.bytes[2], ip.bytes[3]});
  }
  return asio::ip::address_v6(ip.bytes);
}

policy::IpAddress from_asio(const asio::ip::address& a) {
  if (a.is_v4()) {
    return policy::IpAddress::from_v4(a.to_v4().to_uint());
  }
  auto b = a.to_v6().to_bytes();
  uint8_t raw[16];
  for (size_t i = 0; i < 16; ++i) {
    raw[i] = b[i];
  }
  return policy::IpAddress::from_v6_bytes(raw);
}

void log_coroutine_end(const char* what, std::exception_ptr e) {
  if (!e) {
    return;
  }
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::warn("cordon-netproxy: {} ended with an exception: {}", what, ex.what());
  } catch (...) {
    spdlog::warn("cordon-netproxy: {} ended with an unknown exception", what);
  }
}

std::string peer_text(const tcp::socket& s) {
  boost::system::error_code ec;
  tcp::endpoint ep = s.remote_endpoint(ec);
  if (ec) {
    return {};
  }
  return peer_text(ep);
}

std::string peer_text(const tcp::endpoint& ep) {
  asio::ip::address a = ep.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  }
  std::string port = std::to_string(ep.port());
  if (a.is_v4()) {
    return from_asio(a).to_string() + ":" + port;  // IpAddress's own v4 text: no inet_ntop
  }
  return "[" + a.to_string() + "]:" + port;
}

std::string Context::client_of(const tcp::socket& s) const {
  return events.enabled() ? peer_text(s) : std::string();
}

std::string Context::client_of(const tcp::endpoint& peer) const {
  return events.enabled() ? peer_text(peer) : std::string();
}

}  // namespace cordon::netproxy
