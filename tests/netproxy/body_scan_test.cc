// The body scanner: every form of a secret found, split at every offset, never before it is
// complete let out, and nothing found in random bytes.
#include "netproxy/body_scan.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cordon::netproxy
