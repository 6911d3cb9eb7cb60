// The client's first flight on a connection the proxy has not yet relayed: peeked (TLS
// ClientHello SNI or HTTP Host) so that the name the client claims can be checked against the name
// the connection was decided on. Shared by the transparent front end and the named tunnels
// (CONNECT, SOCKS5 by name), so domain fronting is refused the same way on every path.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string>

#include "netproxy/context.h"
#include "netproxy/credentials.h"
#include "netproxy/upstream.h"

namespace cordon::netproxy {

struct FirstFlight {
  // tls | http | opaque | silent | incomplete (began as a ClientHello or a request head and did
  // not complete: too slow, too large, or the client stopped) | malformed (began as one and does
  // not parse: two Host headers, a zero-length handshake record, bare LF line ends, a blank line
  // before the request line). Callers refuse incomplete and malformed: a server may still accept
  // such bytes, and relaying them as an opaque stream would skip SNI, Host, rule and inspection.
  std::string kind = "silent";
  bool began_http = false;  // incomplete/malformed: began as a request head (else a TLS record)
  std::string claimed;      // SNI or Host, normalised; empty if none
  bool claimed_raw_ip = false;
  std::string method;     // http: the request's method (refusal events name it)
  std::string target;     // http: the request's target, as sent (a decider's question names it)
  bool obs_fold = false;  // http: the head has a folded line (wire::HttpHead::obs_fold)
};

// Reads the first flight into `buf` (which keeps every byte, for relaying later) until it parses
// as a ClientHello or an HTTP head, is neither, or ctx.peek_timeout passes (a server-speaks-first
// client sends nothing: kind "silent"). nullopt: the client closed before sending anything.
// Bytes that have begun a ClientHello (a TLS handshake record header) or a request head (a
// registered method: wire::http_request_begun) are never taken for an opaque stream, however
// slowly the rest comes: the peek then waits up to ctx.handshake_timeout, and a flight still
// unfinished then (or past the peek's size) is kind "incomplete", which callers refuse.
// Otherwise a client could pause mid-head and have SNI, Host, URL, header and rule checks
// skipped. Other bytes keep the short peek (a line protocol's "PING" waits for its answer).
// The socket should be non-blocking: bytes already queued are then taken without a timer.
asio::awaitable<std::optional<FirstFlight>> peek_first_flight(Context& ctx, tcp::socket& s,
                                                              beast::flat_buffer& buf);

// true for the kinds no caller may relay: incomplete and malformed.
inline bool unreadable_first_flight(const FirstFlight& f) {
  return f.kind == "incomplete" || f.kind == "malformed";
}

// Refuses an incomplete or malformed first flight (see peek_first_flight): a net.refused event
// (rule "network (first flight incomplete)" or "network (first flight malformed)"), then a 400
// for a request head or a reset for a TLS record; nothing is dialled or relayed.
asio::awaitable<void> refuse_unreadable_first_flight(Context& ctx, tcp::socket& s,
                                                     const FirstFlight& f, const RequestSite& at);

// Refuses: HTTP gets a readable answer (`status`: "403 Forbidden" unless told); TLS and opaque
// streams are reset (RST via SO_LINGER 0).
asio::awaitable<void> refuse_first_flight(tcp::socket& s, const FirstFlight& f,
                                          const std::string& msg,
                                          std::string_view status = "403 Forbidden");

// Before the connection is decided on and any upstream dialled for it (transparent; in a named
// tunnel, before a byte is relayed): a first flight whose claimed name (TLS SNI: channel "sni";
// HTTP Host: "header host") carries a form of a secret, or an opaque stream whose peeked bytes
// carry a form of one not bound to `at`'s name and port (channel "stream"), is refused as
// refuse_first_flight does, with a net.exfil event (its method: the HTTP method, TLS or TCP).
// true: refused. Only the first flight is read:
// an opaque stream relayed after it is not scanned; HTTP heads and bodies are judged by the HTTP
// front end, and a TLS stream past its ClientHello is encrypted.
asio::awaitable<bool> refuse_secret_in_first_flight(Context& ctx, tcp::socket& s,
                                                    const FirstFlight& f,
                                                    const beast::flat_buffer& buf,
                                                    const RequestSite& at);

// For a tunnel whose name the client stated (CONNECT host:port, SOCKS5 by name) and which is
// already open to that name's checked address: peeks the first flight and refuses the connection
// (event net.refused, rule "network (name mismatch)") when its SNI or Host names another host,
// which is the domain-fronting pattern. A request head with a folded line (obs-fold) is refused
// with 400 (net.refused, rule "network (obs-fold)"): the server may read its fields otherwise
// than the scan did. A raw-IP target has no name to front and is not peeked.
// true: relay it (the peeked bytes stay in `buf`; up.sni is filled for a ClientHello).
asio::awaitable<bool> tunnel_claim_matches(Context& ctx, tcp::socket& s, beast::flat_buffer& buf,
                                           Upstream& up);

// tunnel_claim_matches, then start_tunnel, on a coroutine of its own: the front end returns at
// once, so its handshake state (request parser, buffers) is freed while the client is peeked.
void start_named_tunnel(Context& ctx, tcp::socket client, tcp::socket upstream, Upstream up,
                        std::string leftover);

}  // namespace cordon::netproxy
