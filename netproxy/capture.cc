// Capture ruleset through libnftables.
#include "netproxy/capture.h"

#include <nftables/libnftables.h>

#include <memory>

namespace cordon::netproxy {

namespace {

struct NftFree {
  void operator()(nft_ctx* c) const { nft_ctx_free(c); }
};
using NftCtx = std::unique_ptr<nft_ctx, NftFree>;

Status run_nft(const std::string& commands, const std::string& what) {
  NftCtx ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) {
    return make_error("nft_ctx_new() for " + what, "is libnftables installed?");
  }
  nft_ctx_buffer_output(ctx.get());
  nft_ctx_buffer_error(ctx.get());
  if (nft_run_cmd_from_buffer(ctx.get(), commands.c_str()) != 0) {
    std::string err = nft_ctx_get_error_buffer(ctx.get());
    while (!err.empty() && err.back() == '\n') {
      err.pop_back();
    }
    return make_error(what + ": nft: " + err,
                      "needs CAP_NET_ADMIN in the sandbox's network namespace and the nf_tables, "
                      "nft_redirect and nfnetlink_log kernel modules");
  }
  return {};
}

}  // namespace

std::string capture_ruleset(const CaptureConfig& c) {
  const std::string p = std::to_string(c.proxy_port);
  // The host loopback services come before loopback's own exemption; only their ports go.
  std::string forwards;
  for (const auto& f : c.loopback) {
    std::string ports = f.port_lo == f.port_hi
                            ? std::to_string(f.port_lo)
                            : std::to_string(f.port_lo) + "-" + std::to_string(f.port_hi);
    forwards += std::string("    ") + (f.v6 ? "ip6" : "ip") + " daddr " + f.net + " tcp dport " +
                ports + " redirect to :" + p + "\n";
  }
  const std::string d = std::to_string(c.dns_port);
  const std::string dt = std::to_string(c.dns_tcp_port != 0 ? c.dns_tcp_port : c.dns_port);
  const std::string g = std::to_string(c.nflog_group);
  // `add table` + `delete table` makes the install idempotent in one transaction.
  return "add table inet " + c.table + "\n" + "delete table inet " + c.table + "\n" +
         "table inet " + c.table +
         " {\n"
         // NAT runs first (priority -100): connections leaving for anything but loopback are
         // pointed at the proxy's sockets, which then pass the filter as loopback traffic.
         "  chain nat_output {\n"
         "    type nat hook output priority -100; policy accept;\n" +
         forwards +
         "    ip daddr 127.0.0.0/8 return\n"
         "    ip6 daddr ::1 return\n"
         "    udp dport 53 redirect to :" +
         d + "\n" + "    tcp dport 53 redirect to :" + dt + "\n" +
         "    meta l4proto tcp redirect to :" + p + "\n" +
         "  }\n"
         // Fail closed: only loopback (the program's own servers and the redirected flows)
         // leaves; everything else (other UDP, ICMP, raw) is dropped and reported via NFLOG.
         "  chain filter_output {\n"
         "    type filter hook output priority 0; policy drop;\n"
         "    ip daddr 127.0.0.0/8 accept\n"
         "    ip6 daddr ::1 accept\n"
         "    log prefix \"cordon-drop \" group " +
         g + "\n" +
         "    drop\n"
         "  }\n"
         "}\n";
}

Status install_capture_rules(const CaptureConfig& cfg) {
  if (cfg.proxy_port == 0 || cfg.dns_port == 0) {
    return make_error("install_capture_rules: proxy_port and dns_port must be set");
  }
  return run_nft(capture_ruleset(cfg), "installing table inet " + cfg.table);
}

Status remove_capture_rules(const std::string& table) {
  return run_nft("add table inet " + table + "\ndelete table inet " + table + "\n",
                 "removing table inet " + table);
}

}  // namespace cordon::netproxy
