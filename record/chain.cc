// Sealing and verifying events.jsonl lines: SHA-256 over the previous chain value and the line.
#include "record/chain.h"

#include <openssl/evp.h>

#include <memory>
#include <nlohmann/json.hpp>

namespace cordon::record {

namespace {

constexpr std::string_view kVersionField = "\"v\":1";
constexpr std::string_view kChainKey = ",\"chain\":\"";
constexpr std::string_view kNoMatch =
    "does not match its chain value: it was edited, or a line before it was removed";
static_assert(kSchemaVersion == 1, "kVersionField spells the version out");

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// SHA-256 fetched from the default provider once per process: SHA256() and EVP_sha256() look
// the implementation up again on every digest, which cost as much as hashing a line.
const EVP_MD* sha256() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

// hex(SHA-256(prev || body || "}")): body is the line up to where the chain field starts.
std::string chain_hash(std::string_view prev, std::string_view body) {
  thread_local std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const EVP_MD* alg = sha256();
  if (alg == nullptr || !ctx || EVP_DigestInit_ex2(ctx.get(), alg, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), prev.data(), prev.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), body.data(), body.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), "}", 1) != 1 || EVP_DigestFinal_ex(ctx.get(), md, &len) != 1 ||
      len != kChainHexLen / 2) {
    // libcrypto without SHA-256 (no default provider, out of memory): a value no line can match,
    // so the verifier reports the line rather than passing it, and a writer's line fails to verify
    // rather than being left unsealed.
    return std::string(kChainHexLen, 'x');
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kChainHexLen, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string seal(std::string_view object, std::string_view prev, size_t pad) {
  std::string_view inner;
  if (object.size() >= 2 && object.front() == '{' && object.back() == '}') {
    inner = object.substr(1, object.size() - 2);
  }
  std::string line;
  line.reserve(object.size() + pad + kSealOverhead);
  line += '{';
  line += kVersionField;
  if (inner.find_first_not_of(" \t\r\n") != std::string_view::npos) {
    line += ',';
    line += inner;
  }
  line.append(pad, ' ');
  std::string hex = chain_hash(prev, line);
  line += kChainKey;
  line += hex;
  line += "\"}\n";
  return line;
}

std::optional<std::string_view> chain_field(std::string_view line) {
  const size_t tail = kChainKey.size() + kChainHexLen + 2;
  if (line.size() < tail + 1 || line.substr(line.size() - 2) != "\"}") {
    return std::nullopt;
  }
  size_t at = line.size() - tail;
  if (line.substr(at, kChainKey.size()) != kChainKey) {
    return std::nullopt;
  }
  std::string_view hex = line.substr(at + kChainKey.size(), kChainHexLen);
  if (!is_hex(hex)) {
    return std::nullopt;
  }
  return hex;
}

bool ChainVerifier::follows(std::string_view prev, std::string_view line) const {
  return chain_follows(prev, line);
}

bool chain_follows(std::string_view prev, std::string_view line) {
  auto hex = chain_field(line);
  if (!hex) {
    return false;
  }
  size_t body = line.size() - (kChainKey.size() + kChainHexLen + 2);
  return chain_hash(prev, line.substr(0, body)) == *hex;
}

void ChainVerifier::fail(uint64_t n, std::string why) {
  r_.bad_line = n;
  r_.why = std::move(why);
  stopped_ = true;
}

void ChainVerifier::feed(uint64_t n, std::string_view line, bool complete) {
  r_.lines = n;
  if (stopped_) {
    return;
  }
  if (!complete) {
    // A writer stopped mid-line (killed, or the disk filled): the lines before it stand.
    r_.torn_line = n;
    return;
  }
  if (held_n_) {
    // The line that did not follow its predecessor: if this one does, the two changed places
    // (or the held one was put in).
    if (follows(r_.head, line)) {
      fail(*held_n_, "is out of place: line " + std::to_string(n) + " follows line " +
                         std::to_string(*held_n_ - 1) + " (lines reordered, or a line inserted)");
    } else {
      fail(*held_n_, std::string(kNoMatch));
    }
    return;
  }
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return;  // an empty line: whitespace between records
  }
  auto hex = chain_field(line);
  if (!hex) {
    if (nlohmann::json::accept(line)) {
      fail(n, "has no chain field (not written by cordon)");
    } else if (r_.torn_line == 0) {
      // A fragment a writer left when it stopped mid-line; the next writer ended it.
      r_.torn_line = n;
    }
    return;
  }
  if (!follows(r_.head, line)) {
    held_n_ = n;
    held_ = std::string(line);
    return;
  }
  r_.head = std::string(*hex);
  ++r_.chained;
}

ChainReport ChainVerifier::finish() {
  if (held_n_ && !stopped_) {
    fail(*held_n_, std::string(kNoMatch));
  }
  return r_;
}

}  // namespace cordon::record
