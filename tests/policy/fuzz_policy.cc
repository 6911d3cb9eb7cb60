// libFuzzer target: the policy loader and the host/path matchers on arbitrary bytes. Built only
// with -DCORDON_FUZZ=ON (clang); tests/run_fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "policy/loader.h"
#include "policy/serialize.h"

using namespace cordon::policy;

namespace {

// Splits the input at the first two NUL bytes into (pattern, subject, rest) so the matchers get
// independent strings; without NULs the whole input plays every role.
void split(std::string_view in, std::string_view& a, std::string_view& b) {
  size_t z = in.find('\0');
  if (z == std::string_view::npos) {
    a = b = in;
    return;
  }
  a = in.substr(0, z);
  b = in.substr(z + 1);
}

void fuzz_patterns(std::string_view in) {
  std::string_view pat, subject;
  split(in, pat, subject);
  uint16_t port =
      in.size() >= 2 ? static_cast<uint16_t>(in[0] << 8 | static_cast<uint8_t>(in[1])) : 443;
  std::string why;
  if (auto hp = HostPattern::parse(pat, &why)) {
    (void)hp->matches_name(subject, port);
    if (auto ip = IpAddress::parse(subject)) {
      (void)hp->matches_ip(*ip, port);
      (void)ip->is_special();
      (void)ip->is_metadata();
      (void)ip->to_string();
    }
    NetworkPolicy n;
    n.allow.push_back(*hp);
    (void)n.decide_name(subject, port);
  } else if (why.empty()) {
    __builtin_trap();  // a refusal must say why
  }
  (void)normalize_host(subject);
  why.clear();
  if (auto pp = PathPattern::parse(pat, "/home/fuzz", &why)) {
    (void)pp->matches(subject);
    FilesystemPolicy f;
    f.deny.push_back(*pp);
    (void)f.decide_read(subject);
    (void)f.decide_write(subject);
  } else if (why.empty()) {
    __builtin_trap();
  }
  EnvPolicy e;
  e.deny.assign(1, std::string(pat));
  (void)e.is_denied(subject);
  (void)parse_size(pat);
  (void)parse_duration(pat);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  LoadOptions o;
  o.home = "/home/fuzz";
  try {
    Policy p = parse_policy(in, o);
    // Whatever parses must serialize and parse back to the same policy.
    Policy again = parse_policy(to_json(p).dump(), o);
    if (!(again == p)) {
      __builtin_trap();
    }
    (void)explain(p);
  } catch (const PolicyError&) {
    // Refusing is the expected outcome for most inputs.
  }
  if (size <= 4096) {
    fuzz_patterns(in);
  }
  return 0;
}
