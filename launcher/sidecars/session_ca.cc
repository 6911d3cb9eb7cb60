// The session's inspection CA and the sandbox's trust in it.
#include "launcher/sidecars/session_ca.h"

#include <fcntl.h>

#include <algorithm>

#include "base/read_up_to.h"
#include "base/unique_fd.h"
#include "netproxy/tls_ca.h"

namespace cordon::launcher {

namespace {

std::optional<std::string> read_small(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) {
    return std::nullopt;
  }
  return read_up_to(fd.get(), 16u << 20);
}

void set_env(std::vector<std::string>& envp, const std::string& name, const std::string& value) {
  const std::string prefix = name + "=";
  std::erase_if(envp, [&](const std::string& kv) { return kv.starts_with(prefix); });
  envp.push_back(prefix + value);
}

}  // namespace

Result<InspectionCa> trust_inspection_ca(const policy::NetworkPolicy& net,
                                         const std::string& session_dir, LaunchPlan& plan) {
  if (!plan.network || !net.inspects_any()) {
    return InspectionCa{};
  }
  InspectionCa ca;
  if (!net.ca_cert.empty()) {
    auto home = [&](const std::string& p) {
      return p.starts_with("~/") ? plan.home + p.substr(1) : p;
    };
    ca = {home(net.ca_cert), home(net.ca_key)};
    TRY(netproxy::CertAuthority::load(ca.cert_path, ca.key_path));
  } else {
    // Made as the invoking user, in the session directory no sandbox mount shows.
    TRY(netproxy::CertAuthority::in_dir(session_dir));
    ca = {session_dir + "/ca.pem", session_dir + "/ca.key"};
  }
  auto cert = read_small(ca.cert_path);
  if (!cert) {
    return sys_error("network.ca.cert: reading " + ca.cert_path);
  }
  // The host's roots stay trusted for the hosts that are not inspected; a host without a bundle
  // file leaves the sandbox trusting the CA alone, which refuses more, never less.
  std::string bundle = read_small(netproxy::host_trust_file()).value_or("");
  if (!bundle.empty() && bundle.back() != '\n') {
    bundle += '\n';
  }
  bundle += *cert;
  const std::string rel = std::string(kSandboxCaBundle).substr(std::string("/etc/").size());
  std::erase_if(plan.etc_files, [&](const EtcFile& f) { return f.path == rel; });
  plan.etc_files.push_back({rel, std::move(bundle), 0644});
  // The key is planned after the filesystem rules were: a grant that reaches it (a read of the
  // state directory, a workspace holding it) must still not show it. Gone or unreached: no-op.
  plan.mounts.push_back({MountKind::MaskFile, "", ca.key_path});
  for (const char* var : kCaBundleVars) {
    set_env(plan.envp, var, kSandboxCaBundle);
  }
  return ca;
}

}  // namespace cordon::launcher
