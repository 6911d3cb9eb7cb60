// cordon-capture.so: netproxy's capture ruleset (libnftables) behind a C entry point, dlopen'ed by
// the sandbox's child (launcher/netns.cc) only when the session has network.
#include "launcher/capture_plugin/capture_plugin.h"

#include <cstdio>

#include "netproxy/capture.h"
#include "netproxy/nflog.h"

namespace {

int fail(char* err, size_t errlen, const char* what) {
  if (errlen > 0) {
    std::snprintf(err, errlen, "%s", what);
  }
  return -1;
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
    cordon::Status st = cordon::netproxy::install_capture_rules(cfg);
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
