// The body scanner: every form of a secret found, split at every offset, never before it is
// complete let out, and nothing found in random bytes.
#include "netproxy/body_scan.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <random>

namespace cordon::netproxy {
namespace {

const std::string kSecret = "ghp_PlaceH0lderValue0123456789abcdefGHIJKL";
const std::string kCanary = "AKIAQWERTYUIOPASDFGH";

std::string b64(std::string_view s, bool url = false) {
  const char* a = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                      : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= s.size(); i += 3) {
    const uint32_t v =
        uint32_t(uint8_t(s[i])) << 16 | uint32_t(uint8_t(s[i + 1])) << 8 | uint8_t(s[i + 2]);
    out += {a[v >> 18 & 63], a[v >> 12 & 63], a[v >> 6 & 63], a[v & 63]};
  }
  if (s.size() - i == 1) {
    const uint32_t v = uint32_t(uint8_t(s[i])) << 16;
    out += {a[v >> 18 & 63], a[v >> 12 & 63], '=', '='};
  } else if (s.size() - i == 2) {
    const uint32_t v = uint32_t(uint8_t(s[i])) << 16 | uint32_t(uint8_t(s[i + 1])) << 8;
    out += {a[v >> 18 & 63], a[v >> 12 & 63], a[v >> 6 & 63], '='};
  }
  return out;
}

// RFC 4648 base32, unpadded, bit by bit (not the scanner's group-wise way).
std::string b32(std::string_view s, bool lower) {
  const char* a = lower ? "abcdefghijklmnopqrstuvwxyz234567" : "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  std::string out;
  uint32_t bits = 0, have = 0;
  for (const char c : s) {
    bits = (bits << 8 | uint8_t(c)) & 0xffff;
    have += 8;
    while (have >= 5) {
      out += a[bits >> (have - 5) & 31];
      have -= 5;
    }
  }
  if (have > 0) {
    out += a[bits << (5 - have) & 31];
  }
  return out;
}

std::string hex(std::string_view s) {
  std::string out;
  char buf[3];
  for (const char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(c));
    out += buf;
  }
  return out;
}

std::string percent_all(std::string_view s) {
  std::string out;
  char buf[4];
  for (const char c : s) {
    std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
    out += buf;
  }
  return out;
}

// The secrets each feed found, in the order found.
struct Found {
  std::vector<BodyScan::Match> matches;
  // The largest safe_end() seen before the first match.
  uint64_t safe_before_match = 0;
};

Found scan_in_pieces(const BodyScanner& sc, std::string_view body,
                     const std::vector<size_t>& cuts) {
  BodyScan scan(sc);
  Found f;
  size_t at = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(body.size());
  for (const size_t end : ends) {
    scan.feed(body.substr(at, end - at), [&](const BodyScan::Match& m) {
      f.matches.push_back(m);
      return true;
    });
    if (f.matches.empty()) {
      f.safe_before_match = std::max(f.safe_before_match, scan.safe_end());
    }
    at = end;
  }
  return f;
}

struct Case {
  std::string name;
  std::string body;
  size_t form_starts;  // where the encoded secret begins in `body`
  size_t slack;        // how far in the form's stable part may start (base64's first group)
};

std::vector<Case> cases() {
  const std::string pre = "{\"data\": \"", post = "\", \"more\": 1}";
  std::vector<Case> out;
  auto add = [&](std::string name, std::string enc, size_t slack = 4) {
    out.push_back({std::move(name), pre + enc + post, pre.size(), slack});
  };
  add("raw", kSecret);
  std::string hex_l, hex_u;
  for (const char c : kSecret) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(c));
    hex_l += buf;
    std::snprintf(buf, sizeof buf, "%02X", static_cast<unsigned char>(c));
    hex_u += buf;
  }
  add("hex lower", hex_l);
  add("hex upper", hex_u);
  for (int align = 0; align < 3; ++align) {
    const std::string lead(static_cast<size_t>(align), 'x');
    add("base64 alignment " + std::to_string(align), b64(lead + kSecret + "tail"));
    add("base64url alignment " + std::to_string(align), b64(lead + kSecret, true));
  }
  for (int align = 0; align < 5; ++align) {
    const std::string lead(static_cast<size_t>(align), 'y');
    add("base32 lower alignment " + std::to_string(align), b32(lead + kSecret, true), 8);
    add("base32 upper alignment " + std::to_string(align), b32(lead + kSecret + "t", false), 8);
  }
  add("url-encoded every byte", percent_all(kSecret));
  add("url-encoded some bytes",
      kSecret.substr(0, 5) + percent_all(kSecret.substr(5, 3)) + kSecret.substr(8));
  // MIME: base64 wrapped at 8 characters per line with CRLF, then LF.
  std::string wrapped, lf;
  const std::string enc = b64("12" + kSecret);
  for (size_t i = 0; i < enc.size(); i += 8) {
    wrapped += enc.substr(i, 8) + "\r\n";
    lf += enc.substr(i, 8) + "\n";
  }
  add("base64 CRLF lines", wrapped, 6);
  add("base64 LF lines", lf);
  add("base64 in a form field", percent_all(b64("x" + kSecret)), 12);
  return out;
}

TEST(BodyScan, EveryFormIsFoundWholeAndSplitAtEveryOffset) {
  BodyScanner sc({kCanary, kSecret});
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    auto whole = scan_in_pieces(sc, c.body, {});
    ASSERT_FALSE(whole.matches.empty());
    EXPECT_EQ(whole.matches[0].secret, 1u);
    for (size_t cut = 0; cut <= c.body.size(); ++cut) {
      auto two = scan_in_pieces(sc, c.body, {cut});
      ASSERT_FALSE(two.matches.empty()) << "split at " << cut;
      EXPECT_EQ(two.matches[0].secret, 1u);
      EXPECT_EQ(two.matches[0].form, whole.matches[0].form);
      // Nothing from where the form begins was ever safe to let out before the match.
      EXPECT_LE(two.safe_before_match, c.form_starts + c.slack) << "split at " << cut;
    }
    std::vector<size_t> bytes;
    for (size_t i = 1; i < c.body.size(); ++i) {
      bytes.push_back(i);
    }
    auto singles = scan_in_pieces(sc, c.body, bytes);
    ASSERT_FALSE(singles.matches.empty());
    EXPECT_LE(singles.safe_before_match, c.form_starts + c.slack);
  }
}

TEST(BodyScan, TheRawFormSaysWhereItEnds) {
  BodyScanner sc({kSecret});
  const std::string body = "abc" + kSecret + "def";
  auto f = scan_in_pieces(sc, body, {10, 20});
  ASSERT_EQ(f.matches.size(), 1u);
  EXPECT_EQ(f.matches[0].form, SecretForm::Raw);
  EXPECT_EQ(f.matches[0].stream, BodyScan::Stream::AsSent);
  EXPECT_EQ(f.matches[0].raw_end, 3 + kSecret.size());
  EXPECT_EQ(f.matches[0].length, kSecret.size());
  // All of the secret was held back until it was complete.
  EXPECT_LE(f.safe_before_match, 3u);
}

TEST(BodyScan, ANearMissIsNotAMatchAndIsLetOut) {
  BodyScanner sc({kSecret});
  std::string near = kSecret;
  near.back() = 'X';
  std::string b = b64(kSecret);
  b[b.size() / 2] = b[b.size() / 2] == 'A' ? 'B' : 'A';
  for (const std::string& body : {near, b, percent_all(near), std::string("%%%4") + near}) {
    BodyScan scan(sc);
    bool found = false;
    scan.feed(body, [&](const BodyScan::Match&) {
      found = true;
      return true;
    });
    EXPECT_FALSE(found) << body;
    scan.feed("    ", [](const BodyScan::Match&) { return true; });
    EXPECT_EQ(scan.safe_end(), scan.scanned()) << body;
  }
}

TEST(BodyScan, RandomBytesGiveNothingAndHoldBackStaysBounded) {
  BodyScanner sc({kSecret, kCanary});
  std::mt19937_64 rng(18);
  const std::string alphabets[] = {
      std::string("0123456789abcdef"),
      std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/\r\n"),
      std::string("%0123456789ABCDEFabcdefghp_\r\n"), std::string()};
  const uint64_t bound = 3 * sc.longest() + 2;
  for (const auto& alpha : alphabets) {
    BodyScan scan(sc);
    std::string chunk(64 * 1024, '\0');
    size_t matches = 0;
    uint64_t worst = 0;
    for (int round = 0; round < 64; ++round) {  // 4 MiB per alphabet
      for (auto& c : chunk) {
        c = alpha.empty() ? static_cast<char>(rng()) : alpha[rng() % alpha.size()];
      }
      scan.feed(chunk, [&](const BodyScan::Match&) {
        ++matches;
        return true;
      });
      worst = std::max(worst, scan.scanned() - scan.safe_end());
    }
    EXPECT_EQ(matches, 0u) << alpha;
    EXPECT_LE(worst, bound) << alpha;
  }
}

TEST(BodyScan, HoldBackIsBoundedWhateverTheInput) {
  BodyScanner sc({kSecret});
  const uint64_t bound = 3 * sc.longest() + 2;
  // A prefix of the secret interleaved with line breaks and escapes, over and over.
  const std::string enc = b64(kSecret);
  std::string body;
  for (int i = 0; i < 2000; ++i) {
    body += enc.substr(0, 20) + "\r\n" + percent_all(kSecret.substr(0, 10)) + "\n\n\n";
  }
  BodyScan scan(sc);
  for (size_t at = 0; at < body.size(); at += 7) {
    scan.feed(std::string_view(body).substr(at, 7), [](const BodyScan::Match&) { return true; });
    ASSERT_LE(scan.scanned() - scan.safe_end(), bound) << "at " << at;
  }
}

TEST(BodyScan, AFeedStopsWhenTold) {
  BodyScanner sc({kSecret});
  BodyScan scan(sc);
  int calls = 0;
  EXPECT_FALSE(scan.feed(kSecret + kSecret, [&](const BodyScan::Match&) {
    ++calls;
    return false;
  }));
  EXPECT_EQ(calls, 1);
}

TEST(BodyScan, FindSecretNamesTheFormAndSkipsWhatItIsTold) {
  BodyScanner sc({kCanary, kSecret});
  auto hit = find_secret(sc, "/v1?q=" + b64("ab" + kSecret) + "&x=1");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->secret, 1u);
  EXPECT_EQ(hit->encoding, "base64");
  hit = find_secret(sc, "id=" + percent_all(hex(kCanary)));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->secret, 0u);
  EXPECT_EQ(hit->encoding, "url-encoded hex");
  hit = find_secret(sc, b32(kSecret, false));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->encoding, "base32");
  EXPECT_FALSE(find_secret(sc, "Bearer " + kSecret, {false, true}));
  EXPECT_TRUE(find_secret(sc, "Bearer " + kSecret, {true, false}));
  EXPECT_FALSE(find_secret(sc, "Bearer " + kSecret.substr(1)));
}

TEST(BodyScan, NameLettersDropTheDotsAndTheCase) {
  EXPECT_EQ(name_letters("6768.705F.Exfil.TEST."), "6768705fexfiltest");
  EXPECT_EQ(name_letters(""), "");
  EXPECT_EQ(name_letters("..."), "");
  EXPECT_EQ(name_letters(std::string("a\0.\xff\x80Z", 6)), std::string("a\0\xff\x80z", 5));
}

TEST(BodyScan, ANameCarryingASecretIsFoundHoweverItIsCut) {
  BodyScanner sc({kCanary, kSecret});
  const std::string h = hex(kSecret), c = b32(kCanary, true);
  struct Want {
    std::string name;
    uint32_t secret;
    std::string encoding;
  };
  std::vector<Want> wants = {
      {h.substr(0, 63) + "." + h.substr(63) + ".exfil.example", 1, "hex"},
      {"x." + h.substr(0, 1) + "." + h.substr(1, 40) + "." + h.substr(41) + ".example", 1, "hex"},
      {b32(kSecret, false).substr(0, 30) + "." + b32(kSecret, false).substr(30) + ".Example.", 1,
       "base32"},
      {c.substr(0, 10) + "." + c.substr(10) + ".example", 0, "base32"},
      {"Q" + b64(kCanary, true).substr(0, 12) + "." + b64(kCanary, true).substr(12) + ".example", 0,
       "base64"},  // its base64 and base64url are the same here: reported as either
  };
  // Hex in capitals is found as lower case.
  std::string upper = h;
  for (char& ch : upper) {
    ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  wants.push_back({upper.substr(0, 50) + "." + upper.substr(50) + ".example", 1, "hex"});
  // A secret with capitals, its case dropped on the way (resolvers, the stub, getent): found.
  std::string lowered = kCanary;
  for (char& ch : lowered) {
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  wants.push_back({lowered + ".other.test", 0, "lower-case"});
  wants.push_back({kCanary + ".other.test", 0, ""});
  for (const auto& w : wants) {
    SCOPED_TRACE(w.name);
    auto hit = find_secret_in_name(sc, w.name);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->secret, w.secret);
    EXPECT_EQ(hit->encoding.substr(0, w.encoding.size()), w.encoding);
  }
  // Near misses: a byte short, one digit off, the canary's base64 with its case lost.
  std::string off = h;
  off[40] = off[40] == '0' ? '1' : '0';
  std::string lost = b64(kCanary);
  for (char& ch : lost) {
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  for (const std::string& name : {h.substr(2, 60) + "." + h.substr(62) + ".example",
                                  off.substr(0, 60) + "." + off.substr(60) + ".example",
                                  lost + ".example", std::string("api.github.com")}) {
    EXPECT_FALSE(find_secret_in_name(sc, name)) << name;
  }
}

// A random label of 40 hex digits can hold only forms made of hex digits alone (here the canary's
// hex, 40 digits: odds 16^-40 per label; docs/security.md has the general bound). 20000 random
// labels finding nothing checks that nothing shorter or looser is in the automaton.
TEST(BodyScan, RandomHexLabelsAreNotSecrets) {
  BodyScanner sc({kCanary, kSecret});
  std::mt19937_64 rng(18);
  for (int i = 0; i < 20000; ++i) {
    std::string label;
    for (int j = 0; j < 40; ++j) {
      label += "0123456789abcdef"[rng() % 16];
    }
    ASSERT_FALSE(find_secret_in_name(sc, label + ".exfil.example")) << label;
  }
}

}  // namespace
}  // namespace cordon::netproxy
