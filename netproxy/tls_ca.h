// The inspection CA: a per-session or user-supplied CA, and leaf certificates minted from it per
// server name (cached), each ready as a server-side SSL_CTX.
#pragma once

#include <openssl/ssl.h>

#include <map>
#include <memory>
#include <string>

#include "base/result.h"

namespace cordon::netproxy {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;

class CertAuthority {
 public:
  // Loads a CA from PEM files (network.ca); errors name the file and the fix.
  static Result<std::unique_ptr<CertAuthority>> load(const std::string& cert_file,
                                                     const std::string& key_file);
  // The same from PEM text already read; `cert_name` and `key_name` say where it came from in
  // errors.
  static Result<std::unique_ptr<CertAuthority>> from_pem(const std::string& cert_pem,
                                                         const std::string& key_pem,
                                                         const std::string& cert_name,
                                                         const std::string& key_name);
  // The session CA in `dir`: ca.pem and ca.key (0600, created with O_EXCL) are made when absent,
  // an ECDSA P-256 key and a self-signed certificate valid for 30 days; loaded when present.
  static Result<std::unique_ptr<CertAuthority>> in_dir(const std::string& dir);

  ~CertAuthority();
  CertAuthority(const CertAuthority&) = delete;
  CertAuthority& operator=(const CertAuthority&) = delete;

  // A server context presenting a leaf for `name` (a DNS name, or an IP literal for an IP SAN),
  // minted on first use and kept for the proxy's life. nullptr if minting failed.
  SSL_CTX* server_ctx(const std::string& name);
  size_t minted() const { return leaves_.size(); }

 private:
  CertAuthority() = default;
  struct Keys;
  std::unique_ptr<Keys> keys_;
  std::map<std::string, SslCtxPtr> leaves_;
};

// The CA bundle file of the host's trust store as OpenSSL finds it: $SSL_CERT_FILE, else
// OpenSSL's default (/usr/lib/ssl/cert.pem on Debian, a link to ca-certificates.crt).
std::string host_trust_file();

// A client context that verifies servers against the host's trust store as OpenSSL finds it
// (SSL_CERT_FILE / SSL_CERT_DIR honoured), TLS 1.2 or newer, ALPN http/1.1.
Result<SslCtxPtr> upstream_client_ctx();

}  // namespace cordon::netproxy
