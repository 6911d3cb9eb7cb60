// The inspection CA and leaf minting, on OpenSSL 3's EVP and X509 APIs.
#include "netproxy/tls_ca.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/read_up_to.h"
#include "base/unique_fd.h"

namespace cordon::netproxy {

namespace {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

// OpenSSL's error queue as text (and emptied), for messages.
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += out.empty() ? "" : "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

bool add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
  if (ext == nullptr) {
    return false;
  }
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key`'s public half with subject CN `cn`, signed by `issuer_key` (self-signed
// when `issuer` is null), valid from an hour ago for `valid_seconds`.
X509Ptr make_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                  long valid_seconds) {
  X509Ptr cert(X509_new());
  if (!cert) {
    return nullptr;
  }
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) {
    return nullptr;
  }
  serial[0] &= 0x7f;  // a positive serial
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  bool ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) != nullptr;
  BN_free(bn);
  ok = ok && X509_set_version(cert.get(), 2) == 1;
  ok = ok && X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr &&
       X509_gmtime_adj(X509_getm_notAfter(cert.get()), valid_seconds) != nullptr;
  X509_NAME* name = X509_get_subject_name(cert.get());
  ok = ok &&
       X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>("cordon"), -1, -1,
                                  0) == 1 &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                  0) == 1;
  ok = ok && X509_set_issuer_name(cert.get(),
                                  issuer != nullptr ? X509_get_subject_name(issuer) : name) == 1;
  ok = ok && X509_set_pubkey(cert.get(), key) == 1;
  if (!ok) {
    return nullptr;
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (issuer == nullptr) {
    ok = add_ext(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
         add_ext(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign") &&
         add_ext(cert.get(), signer, NID_subject_key_identifier, "hash");
  } else {
    // The leaf names exactly the one server name: an IP literal becomes an IP SAN.
    const bool ip = cn.find(':') != std::string::npos ||
                    cn.find_first_not_of("0123456789.") == std::string::npos;
    ok = add_ext(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE") &&
         add_ext(cert.get(), signer, NID_key_usage, "critical,digitalSignature") &&
         add_ext(cert.get(), signer, NID_ext_key_usage, "serverAuth") &&
         add_ext(cert.get(), signer, NID_subject_alt_name, (ip ? "IP:" : "DNS:") + cn) &&
         add_ext(cert.get(), signer, NID_authority_key_identifier, "keyid:always");
  }
  if (!ok || X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) {
    return nullptr;
  }
  return cert;
}

Status write_pem_file(const std::string& path, mode_t mode, bool key, X509* cert, EVP_PKEY* pk) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) {
    return sys_error("creating " + path);
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  bool ok = bio && (key ? PEM_write_bio_PrivateKey(bio.get(), pk, nullptr, nullptr, 0, nullptr,
                                                   nullptr) == 1
                        : PEM_write_bio_X509(bio.get(), cert) == 1);
  if (!ok) {
    return make_error("encoding " + path + ": " + ssl_errors());
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  if (write(fd.get(), data, static_cast<size_t>(len)) != len || fsync(fd.get()) != 0) {
    return sys_error("writing " + path);
  }
  return {};
}

std::string expand_home(const std::string& path) {
  const char* home = std::getenv("HOME");
  return path.starts_with("~/") && home != nullptr ? std::string(home) + path.substr(1) : path;
}

// A PEM file's text (bounded: a CA is a few KiB), or nullopt with errno.
std::optional<std::string> read_pem_file(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return std::nullopt;
  }
  return read_up_to(fd.get(), 1u << 20);
}

// The ALPN the proxy speaks to the sandbox: HTTP/1.1 only. A client offering only other
// protocols gets no ALPN answer and so speaks HTTP/1.1.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* sel = nullptr;
  if (SSL_select_next_proto(&sel, outlen, kHttp11, sizeof kHttp11, in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

struct CertAuthority::Keys {
  X509Ptr ca;
  PkeyPtr ca_key;
  PkeyPtr leaf_key;  // one key for every leaf: minting is one signature
};

CertAuthority::~CertAuthority() = default;

Result<std::unique_ptr<CertAuthority>> CertAuthority::load(const std::string& cert_file,
                                                           const std::string& key_file) {
  const std::string cf = expand_home(cert_file), kf = expand_home(key_file);
  auto cert = read_pem_file(cf);
  if (!cert) {
    return sys_error("network.ca.cert: opening " + cf, "give the CA certificate as a PEM file");
  }
  auto key = read_pem_file(kf);
  if (!key) {
    return sys_error("network.ca.key: opening " + kf, "give the CA's private key as a PEM file");
  }
  return from_pem(*cert, *key, cf, kf);
}

Result<std::unique_ptr<CertAuthority>> CertAuthority::from_pem(const std::string& cert_pem,
                                                               const std::string& key_pem,
                                                               const std::string& cf,
                                                               const std::string& kf) {
  std::unique_ptr<CertAuthority> ca(new CertAuthority);
  ca->keys_ = std::make_unique<Keys>();
  BioPtr bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  ca->keys_->ca.reset(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!ca->keys_->ca) {
    return make_error("network.ca.cert: " + cf + " holds no PEM certificate: " + ssl_errors());
  }
  bio.reset(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  ca->keys_->ca_key.reset(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                              : nullptr);
  if (!ca->keys_->ca_key) {
    return make_error("network.ca.key: " + kf +
                      " holds no unencrypted PEM private key: " + ssl_errors());
  }
  if (X509_check_private_key(ca->keys_->ca.get(), ca->keys_->ca_key.get()) != 1) {
    return make_error("network.ca: the key " + kf + " does not belong to the certificate " + cf);
  }
  if (X509_check_ca(ca->keys_->ca.get()) == 0) {
    return make_error("network.ca.cert: " + cf + " is not a CA certificate",
                      "give a certificate with basicConstraints CA:TRUE");
  }
  ca->keys_->leaf_key.reset(EVP_EC_gen("P-256"));
  if (!ca->keys_->leaf_key) {
    return make_error("generating the leaf key: " + ssl_errors());
  }
  return ca;
}

Result<std::unique_ptr<CertAuthority>> CertAuthority::in_dir(const std::string& dir) {
  const std::string cert = dir + "/ca.pem", key = dir + "/ca.key";
  if (access(cert.c_str(), F_OK) != 0) {
    PkeyPtr pk(EVP_EC_gen("P-256"));
    if (!pk) {
      return make_error("generating the session CA key: " + ssl_errors());
    }
    X509Ptr c = make_cert(pk.get(), "cordon session CA", nullptr, pk.get(), 30L * 86400);
    if (!c) {
      return make_error("making the session CA certificate: " + ssl_errors());
    }
    // The key first: a certificate on disk always has its key next to it.
    TRY(write_pem_file(key, 0600, true, nullptr, pk.get()));
    TRY(write_pem_file(cert, 0644, false, c.get(), nullptr));
  }
  return load(cert, key);
}

SSL_CTX* CertAuthority::server_ctx(const std::string& name) {
  if (auto it = leaves_.find(name); it != leaves_.end()) {
    return it->second.get();
  }
  X509Ptr leaf =
      make_cert(keys_->leaf_key.get(), name, keys_->ca.get(), keys_->ca_key.get(), 24L * 3600);
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!leaf || !ctx || SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION) != 1 ||
      SSL_CTX_use_certificate(ctx.get(), leaf.get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), keys_->leaf_key.get()) != 1 ||
      SSL_CTX_add1_chain_cert(ctx.get(), keys_->ca.get()) != 1) {
    ERR_clear_error();
    return nullptr;
  }
  SSL_CTX_set_alpn_select_cb(ctx.get(), select_alpn, nullptr);
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_SERVER);
  // Bounded: a sandbox naming many hosts cannot grow the cache without end.
  if (leaves_.size() >= 4096) {
    leaves_.clear();
  }
  return leaves_.emplace(name, std::move(ctx)).first->second.get();
}

std::string host_trust_file() {
  const char* env = std::getenv(X509_get_default_cert_file_env());
  return env != nullptr && *env != '\0' ? env : X509_get_default_cert_file();
}

Result<SslCtxPtr> upstream_client_ctx() {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx || SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION) != 1) {
    return make_error("making the upstream TLS context: " + ssl_errors());
  }
  // The host's trust store as OpenSSL finds it: SSL_CERT_FILE / SSL_CERT_DIR, else the defaults.
  if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
    return make_error("loading the host's trust store: " + ssl_errors(),
                      "check SSL_CERT_FILE / SSL_CERT_DIR");
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx.get(), kHttp11, sizeof kHttp11);
  return ctx;
}

}  // namespace cordon::netproxy
