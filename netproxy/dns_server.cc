// DNS responder: answers only allowed names; nothing about any other name ever leaves the host.
#include "netproxy/dns_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "netproxy/body_guard.h"
#include "netproxy/decide.h"
#include "netproxy/decider.h"
#include "netproxy/dns_tunnel.h"
#include "netproxy/wire/dns_message.h"

namespace cordon::netproxy {

namespace {

using udp = asio::ip::udp;
namespace dns = wire::dns;
constexpr uint32_t kMaxUdpInFlight = 64;  // queries awaiting the host resolver at once

bool type_allowed(const policy::NetworkPolicy& p, uint16_t qtype) {
  auto name = dns::type_name(qtype);
  return std::any_of(p.dns_types.begin(), p.dns_types.end(),
                     [&](const std::string& t) { return t == name; });
}

}  // namespace

asio::awaitable<std::vector<uint8_t>> answer_dns(Context& ctx, std::span<const uint8_t> msg,
                                                 size_t max_reply) {
  const auto& p = ctx.policy;
  dns::Query q;
  auto parsed = dns::parse_query(msg, &q);
  if (parsed == dns::ParseResult::Drop) {
    ctx.emit("net.dns", {{"decision", "deny"},
                         {"rule", "network.dns"},
                         {"reason", "malformed or not a query; dropped"},
                         {"size", msg.size()}});
    co_return std::vector<uint8_t>{};
  }
  if (parsed != dns::ParseResult::Ok) {
    auto rcode = parsed == dns::ParseResult::NotImp ? dns::kNotImp : dns::kFormErr;
    ctx.emit("net.dns", {{"decision", "deny"},
                         {"rule", "network.dns"},
                         {"rcode", rcode == dns::kNotImp ? "NOTIMP" : "FORMERR"},
                         {"reason", "malformed query"}});
    co_return dns::build_header_only(q.id, q.flags, rcode);
  }
  nlohmann::json ev = {{"name", q.name}, {"type", dns::type_name(q.qtype)}};
  auto finish = [&](dns::Rcode rcode, const policy::Decision& d,
                    const std::vector<dns::Answer>& answers, nlohmann::json more = {}) {
    if (!ctx.events.enabled()) {
      return dns::build_response(q, rcode, answers, max_reply);  // skip the per-query event
    }
    static const char* kNames[] = {"NOERROR",  "FORMERR", "SERVFAIL",
                                   "NXDOMAIN", "NOTIMP",  "REFUSED"};
    ev["rcode"] = kNames[rcode];
    ev["decision"] = d.allow ? "allow" : "deny";
    ev["rule"] = d.rule;
    auto list = nlohmann::json::array();
    for (const auto& a : answers) {
      uint8_t b[16] = {};
      std::copy(a.rdata.begin(), a.rdata.end(), b);
      list.push_back(a.type == dns::kA ? policy::IpAddress::from_v4((uint32_t{b[0]} << 24) |
                                                                    (uint32_t{b[1]} << 16) |
                                                                    (uint32_t{b[2]} << 8) | b[3])
                                             .to_string()
                                       : policy::IpAddress::from_v6_bytes(b).to_string());
    }
    ev["answers"] = std::move(list);
    if (more.is_object()) {
      for (auto& [k, v] : more.items()) {
        ev[k] = v;
      }
    }
    ctx.emit("net.dns", std::move(ev));  // finish runs once per query
    return dns::build_response(q, rcode, answers, max_reply);
  };

  // Before anything else, allowed names included: a wildcard entry would otherwise forward the
  // name, and whatever it carries, to the host resolver and on to the zone's servers.
  // REFUSED, not the NXDOMAIN of a name the policy does not allow: the name may well exist, it is
  // what it carries that is refused, and a refusal is not cached as the name's non-existence.
  if (auto refused = refuse_secret_in_name(
          ctx, {q.name, 53, "", dns::type_name(q.qtype), "", "dns"}, q.name, "dns")) {
    co_return finish(dns::kRefused, {false, refused->rule()}, {},
                     {{"reason", refused->refusal.line}});
  }
  if (q.qclass != 1) {
    co_return finish(dns::kRefused, {false, "network.dns (class not IN)"}, {});
  }
  // The name first: a query for a name that is not allowed is NXDOMAIN whatever its type, and
  // is never forwarded: no data can ride out in the name.
  auto d = p.decide_dns(q.name);
  ev["decided_by"] = "policy";
  if (ctx.decider != nullptr && decider_may_answer(d) && type_allowed(p, q.qtype) &&
      (q.qtype == dns::kA || q.qtype == dns::kAaaa)) {
    // Held like a connection: the answer waits for the decider (the client may retry meanwhile;
    // a retry is a question of its own unless a session answer covers it).
    DeciderQuestion dq;
    dq.kind = "dns";
    dq.host = q.name;
    dq.mode = "dns";
    auto v = co_await ctx.decider->ask(std::move(dq));
    ev["decided_by"] = source_name(v.source);
    if (v.allow) {
      d = {true, std::string(source_name(v.source)) + (v.session ? " (session)" : " (once)")};
    } else {
      nlohmann::json more = nlohmann::json::object();
      if (!v.reason.empty()) {
        // The decider's own words, or what went wrong with it (timeout, a broken channel).
        more[answered(v.source) ? "decider_reason" : "reason"] = v.reason;
      }
      co_return finish(dns::kNxDomain, d.decision(), {}, more);
    }
  }
  if (!d.allow) {
    co_return finish(dns::kNxDomain, d.decision(), {});
  }
  if (allowed_by_any_name(d)) {
    // Only `*` allows it (--learn): no zone was chosen, so the name is not forwarded when it
    // looks like data for whichever zone's servers would read it.
    if (auto why = tunnel_shaped(q.name)) {
      co_return finish(dns::kRefused, {false, kTunnelRule}, {}, {{"reason", *why}});
    }
  }
  if (!type_allowed(p, q.qtype)) {
    co_return finish(dns::kRefused, {false, "network.dns.types"}, {});
  }
  if (q.qtype != dns::kA && q.qtype != dns::kAaaa) {
    // Other types listed in network.dns.types: the host resolver interface only gives addresses,
    // so they are answered as "no data" rather than forwarded.
    co_return finish(dns::kNoError, d.decision(), {});
  }
  const bool want_v6 = q.qtype == dns::kAaaa;
  std::vector<policy::IpAddress> candidates;
  bool pinned = false;
  if (const auto* pins = p.pins(q.name)) {
    candidates = *pins;
    pinned = true;
  } else {
    tcp::resolver resolver(ctx.io);
    auto [ec, results] =
        co_await resolver.async_resolve(want_v6 ? tcp::v6() : tcp::v4(), q.name, "", use_nothrow);
    if (ec == asio::error::host_not_found) {
      co_return finish(dns::kNxDomain, d.decision(), {},
                       {{"reason", "host resolver: " + ec.message()}});
    }
    if (ec && ec != asio::error::no_data && ec != asio::error::host_not_found_try_again) {
      co_return finish(dns::kServFail, d.decision(), {},
                       {{"reason", "host resolver: " + ec.message()}});
    }
    if (!ec) {
      for (const auto& r : results) {
        auto ip = from_asio(r.endpoint().address());
        if (std::find(candidates.begin(), candidates.end(), ip) == candidates.end() &&
            candidates.size() < 16) {
          candidates.push_back(ip);
        }
      }
    }
  }
  // Port for the address check: the first port the allowing entry names.
  const uint16_t port = d.pattern != nullptr ? std::max<uint16_t>(1, d.pattern->port_lo) : 1;
  std::vector<dns::Answer> answers;
  nlohmann::json refused = nlohmann::json::array();
  nlohmann::json real = nlohmann::json::array();
  for (const auto& ip : candidates) {
    if (ip.v6 != want_v6) {
      continue;
    }
    auto ad = p.check_resolved(q.name, ip, port, pinned, d);
    if (!ad.allow) {
      refused.push_back(ip.to_string());  // never handed to the sandbox
      continue;
    }
    auto seen = ctx.names.remember(q.name, ip);
    dns::Answer a;
    a.type = want_v6 ? dns::kAaaa : dns::kA;
    a.ttl = kDnsTtl;
    a.rdata.assign(seen.bytes.begin(), seen.bytes.begin() + (want_v6 ? 16 : 4));
    answers.push_back(std::move(a));
    real.push_back(ip.to_string());
  }
  nlohmann::json more = {{"addresses", real}};
  if (!refused.empty()) {
    more["refused_addresses"] = refused;
  }
  co_return finish(dns::kNoError, d.decision(), answers, more);
}

asio::awaitable<void> serve_dns_udp(Context& ctx, udp::socket& sock) {
  uint32_t in_flight = 0;
  std::array<uint8_t, dns::kMaxMessage + 1> buf;
  for (;;) {
    udp::endpoint from;
    auto [ec, n] = co_await sock.async_receive_from(asio::buffer(buf), from, use_nothrow);
    if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
      co_return;
    }
    if (ec || n > dns::kMaxMessage) {
      continue;  // oversized (truncated by us) or a transient error: drop
    }
    if (in_flight >= kMaxUdpInFlight) {
      continue;  // bounded: the client retries
    }
    ++in_flight;
    std::vector<uint8_t> query(buf.begin(), buf.begin() + static_cast<long>(n));
    asio::co_spawn(
        ctx.io,
        [&ctx, &sock, &in_flight, query = std::move(query), from]() -> asio::awaitable<void> {
          auto reply = co_await answer_dns(ctx, query, dns::kMaxUdpReply);
          if (!reply.empty()) {
            co_await sock.async_send_to(asio::buffer(reply), from, use_nothrow);
          }
          --in_flight;
        },
        [](std::exception_ptr e) { log_coroutine_end("DNS query", e); });
  }
}

asio::awaitable<void> serve_dns_tcp_client(Context& ctx, tcp::socket client) {
  beast::tcp_stream s(std::move(client));
  for (int i = 0; i < 100; ++i) {  // bounded queries per connection
    std::array<uint8_t, 2> len_buf;
    s.expires_after(std::chrono::seconds(10));
    auto [ec, n] = co_await asio::async_read(s, asio::buffer(len_buf), use_nothrow);
    if (ec) {
      co_return;
    }
    size_t len = (size_t{len_buf[0]} << 8) | len_buf[1];
    if (len < 12 || len > dns::kMaxMessage) {
      co_return;  // oversized or impossible: close rather than read it
    }
    std::vector<uint8_t> msg(len);
    auto [ec2, n2] = co_await asio::async_read(s, asio::buffer(msg), use_nothrow);
    if (ec2) {
      co_return;
    }
    auto reply = co_await answer_dns(ctx, msg, 65535);
    if (reply.empty()) {
      co_return;
    }
    std::array<uint8_t, 2> out_len{static_cast<uint8_t>(reply.size() >> 8),
                                   static_cast<uint8_t>(reply.size() & 0xff)};
    std::array<asio::const_buffer, 2> bufs{asio::buffer(out_len), asio::buffer(reply)};
    auto [ec3, n3] = co_await asio::async_write(s, bufs, use_nothrow);
    if (ec3) {
      co_return;
    }
  }
}

}  // namespace cordon::netproxy
