// cordon-capture.so: netproxy's capture ruleset (libnftables) behind a C entry point, dlopen'ed by
// the sandbox's child (launcher/sandbox/netns.cc) only when the session has network.
#include "launcher/sandbox/capture_plugin/capture_plugin.h"

#include <nftables/libnftables.h>

#include <cstdio>
#include <memory>
#include <string>

#include "netproxy/capture.h"
#include "netproxy/nflog.h"
#include "policy/host_pattern.h"

namespace {

int fail(char* err, size_t errlen, const char* what) {
  if (errlen > 0) {
    std::snprintf(err, errlen, "%s", what);
  }
  return -1;
}

struct NftFree {
  void operator()(nft_ctx* c) const { nft_ctx_free(c); }
};

// netproxy's capture ruleset for a namespace cloned a moment ago. Its leading "add table; delete
// table" pair (which lets a re-install replace an earlier copy) is dropped: there is no earlier
// copy in a new namespace, and deleting a table makes the kernel's commit wait for an RCU grace
// period (about 1-10 ms of the sandbox's start-up here, against under 1 ms for the rest).
std::string fresh_namespace_ruleset(const cordon::netproxy::CaptureConfig& cfg) {
  std::string rules = cordon::netproxy::capture_ruleset(cfg);
  const std::string replace =
      "add table inet " + cfg.table + "\ndelete table inet " + cfg.table + "\n";
  if (rules.compare(0, replace.size(), replace) == 0) {
    rules.erase(0, replace.size());
  }
  return rules;
}

// The same failure text and hint as netproxy::install_capture_rules.
cordon::Status install_in_fresh_namespace(const cordon::netproxy::CaptureConfig& cfg) {
  std::unique_ptr<nft_ctx, NftFree> ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) {
    return cordon::make_error("nft_ctx_new() for the capture ruleset", "is libnftables installed?");
  }
  nft_ctx_buffer_output(ctx.get());
  nft_ctx_buffer_error(ctx.get());
  if (nft_run_cmd_from_buffer(ctx.get(), fresh_namespace_ruleset(cfg).c_str()) != 0) {
    std::string err = nft_ctx_get_error_buffer(ctx.get());
    while (!err.empty() && err.back() == '\n') {
      err.pop_back();
    }
    return cordon::make_error("installing table inet " + cfg.table + ": nft: " + err,
                              "needs CAP_NET_ADMIN in the sandbox's network namespace and the "
                              "nf_tables, nft_redirect and nfnetlink_log kernel modules");
  }
  return {};
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int cordon_capture_open_nflog(
    const CordonCaptureArgs* args, char* err, size_t errlen) {
  if (args == nullptr || args->size != sizeof(CordonCaptureArgs)) {
    return fail(err, errlen, "cordon-capture.so is from another build of cordon");
  }
  try {
    auto fd = cordon::netproxy::open_nflog_socket(args->nflog_group);
    if (!fd.ok()) {
      return fail(err, errlen, fd.error().to_string().c_str());
    }
    return fd->release();
  } catch (...) {
    return fail(err, errlen, "unexpected exception while opening the NFLOG socket");
  }
}

extern "C" __attribute__((visibility("default"))) int cordon_capture_install(
    const CordonCaptureArgs* args, char* err, size_t errlen) {
  auto fail = [&](const char* what) {
    if (errlen > 0) {
      std::snprintf(err, errlen, "%s", what);
    }
    return -1;
  };
  if (args == nullptr || args->size != sizeof(CordonCaptureArgs)) {
    return fail("cordon-capture.so is from another build of cordon (argument size differs)");
  }
  // Exception firewall: this runs on the child side of a clone.
  try {
    cordon::netproxy::CaptureConfig cfg;
    cfg.proxy_port = args->proxy_port;
    cfg.dns_port = args->dns_port;
    cfg.nflog_group = args->nflog_group;
    for (uint16_t i = 0; i < args->n_loopback && i < CORDON_CAPTURE_MAX_LOOPBACK; ++i) {
      const CordonCaptureLoopback& l = args->loopback[i];
      cordon::policy::IpAddress a;
      if (l.v6) {
        a = cordon::policy::IpAddress::from_v6_bytes(l.addr);
      } else {
        a = cordon::policy::IpAddress::from_v4((uint32_t{l.addr[0]} << 24) |
                                               (uint32_t{l.addr[1]} << 16) |
                                               (uint32_t{l.addr[2]} << 8) | l.addr[3]);
      }
      cfg.loopback.push_back(
          {a.to_string() + "/" + std::to_string(l.prefix), l.v6 != 0, l.port_lo, l.port_hi});
    }
    cordon::Status st = install_in_fresh_namespace(cfg);
    if (!st.ok()) {
      return fail(st.error().to_string().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unexpected exception while installing the capture ruleset");
  }
}
