// The TLS inspection CA of a `cordon run` session: made in the session directory unless
// network.ca names one, trusted inside the sandbox, its key kept outside it.
#pragma once

#include <string>

#include "base/result.h"
#include "launcher/plan.h"
#include "policy/policy.h"

namespace cordon::launcher {

// Where the sandbox finds its trusted CAs: the host's bundle plus the inspection CA.
inline constexpr const char* kSandboxCaBundle = "/etc/ssl/certs/ca-certificates.crt";

// The variables that name a CA bundle for common clients (OpenSSL, Node, Python requests, curl,
// git, pip, cargo, the AWS SDKs, Deno): each is set to kSandboxCaBundle when inspecting.
inline constexpr const char* kCaBundleVars[] = {
    "SSL_CERT_FILE",     "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",    "GIT_SSL_CAINFO",      "PIP_CERT",
    "CARGO_HTTP_CAINFO", "AWS_CA_BUNDLE",       "DENO_CERT"};

// The CA's PEM files on the host, for cordon-netproxy; both empty when nothing is inspected.
struct InspectionCa {
  std::string cert_path, key_path;
};

// With network on and a policy that inspects some host: the CA is network.ca's files ("~/" is
// `plan.home`), else ca.pem and ca.key (0600) made in `session_dir`, and it is checked to load.
// The sandbox's kSandboxCaBundle becomes the host's bundle (as OpenSSL finds it, SSL_CERT_FILE
// honoured) followed by the CA's certificate, kCaBundleVars name it in `plan.envp`, and the key
// is masked in the sandbox wherever a grant would show it.
Result<InspectionCa> trust_inspection_ca(const policy::NetworkPolicy& net,
                                         const std::string& session_dir, LaunchPlan& plan);

}  // namespace cordon::launcher
