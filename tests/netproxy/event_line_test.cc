// The hand-built event lines (netproxy/event_line.h) against nlohmann::json: the same text for the
// same fields, and hostile strings (quotes, control bytes, invalid UTF-8) never break a line.
#include "netproxy/event_line.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>

#include "tests/support/test_env.h"

namespace cordon::netproxy {
namespace {

nlohmann::json with_common(nlohmann::json j, const std::string& kind) {
  j["kind"] = kind;
  j["ts"] = "2026-11-22T10:57:47.123456Z";
  j["session"] = "s1";
  j["source"] = "netproxy";
  return j;
}

std::string dumped(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TEST(EventLine, SameTextAsNlohmann) {
  const std::string url = "http://api.test/a?q=\"x\"&t=\t\x01\x1f\\ é 漢 🙂";
  EventLine line("net.http");
  line.add("method", "GET")
      .add("url", url)
      .add("port", uint16_t{8080})
      .add("status", 200u)
      .add("request_bytes", uint64_t{18446744073709551615u})
      .add("duration_ms", int64_t{-3})
      .add("decision", "allow")
      .add("summary", true);
  nlohmann::json j = {{"method", "GET"},
                      {"url", url},
                      {"port", 8080},
                      {"status", 200},
                      {"request_bytes", uint64_t{18446744073709551615u}},
                      {"duration_ms", -3},
                      {"decision", "allow"},
                      {"summary", true}};
  EXPECT_EQ(line.text("2026-11-22T10:57:47.123456Z", "s1"), dumped(with_common(j, "net.http")));
}

TEST(EventLine, HostileStringsStayInsideTheirField) {
  // A URL trying to close its string and add a field, a NUL, and invalid UTF-8 (a lone
  // continuation byte, a truncated sequence, an overlong '/', a surrogate, above U+10FFFF).
  static constexpr char kInject[] = "/x\",\"decision\":\"deny\"}\n{\"kind\":\"fake\0y";
  constexpr size_t kLen = sizeof kInject - 1;  // the NUL inside included
  const std::string url =
      std::string(kInject, kLen) + "\x80 \xE2\x82 \xC0\xAF \xED\xA0\x80 \xF4\x90\x80\x80 end";
  EventLine line("net.http");
  line.add("url", url).add("decision", "allow");
  const std::string text = line.text("T", "s");
  EXPECT_EQ(text.find('\n'), std::string::npos);
  auto j = nlohmann::json::parse(text);  // throws (fails the test) if the line is not JSON
  EXPECT_EQ(j.size(), 6u) << text;
  EXPECT_EQ(j["decision"], "allow");
  EXPECT_EQ(j["kind"], "net.http");
  const std::string got = j["url"];
  EXPECT_EQ(got.substr(0, kLen), url.substr(0, kLen));
  EXPECT_NE(got.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD where bytes were invalid
  EXPECT_NE(got.find(" end"), std::string::npos);
}

TEST(EventLine, RandomBytesAlwaysMakeOneValidLine) {
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) {
      c = static_cast<char>(rng() % 4 == 0 ? 0x80 + rng() % 128 : rng() % 128);
    }
    EventLine line("net.http");
    line.add("url", s);
    const std::string text = line.text("T", "s");
    ASSERT_EQ(text.find('\n'), std::string::npos);
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << i;
    // Where nlohmann accepts the bytes as UTF-8, both write the very same line.
    nlohmann::json ref = {{"url", s}};
    std::string ref_text;
    bool valid = true;
    try {
      ref_text = ref.dump();
    } catch (const nlohmann::json::type_error&) {
      valid = false;
    }
    if (valid) {
      EXPECT_EQ(j["url"], s);
      nlohmann::json want = {
          {"url", s}, {"kind", "net.http"}, {"ts", "T"}, {"session", "s"}, {"source", "netproxy"}};
      EXPECT_EQ(text, dumped(want));
    }
  }
}

TEST(EventLine, WritesOneLineWithTheCommonFields) {
  cordon::testing::TempDir dir;
  const std::string path = dir / "events.jsonl";
  auto log = record::EventLog::open(path, "sess-9", "netproxy", {});
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE(EventLine("net.connect")
                  .add("name", "api.test")
                  .add("bytes_in", uint64_t{5})
                  .write(log.value())
                  .ok());
  // Too long for one line: EventLog::write truncates the string instead.
  const std::string huge(70000, '\x01');
  ASSERT_TRUE(EventLine("net.http").add("url", huge).write(log.value()).ok());
  std::ifstream in(path);
  std::string a, b, c;
  ASSERT_TRUE(std::getline(in, a));
  ASSERT_TRUE(std::getline(in, b));
  EXPECT_FALSE(std::getline(in, c));
  auto j = nlohmann::json::parse(a);
  EXPECT_EQ(j["kind"], "net.connect");
  EXPECT_EQ(j["session"], "sess-9");
  EXPECT_EQ(j["source"], "netproxy");
  EXPECT_EQ(j["bytes_in"], 5);
  EXPECT_EQ(j["ts"].get<std::string>().size(), 27u);
  auto k = nlohmann::json::parse(b);
  EXPECT_EQ(k["kind"], "net.http");
  EXPECT_LT(b.size(), 64u * 1024);
  EXPECT_EQ(k["url"].get<std::string>().substr(0, 4), std::string(4, '\x01'));
}

// The timestamp without snprintf is the one record::now_rfc3339() writes, also when seconds
// change and come back (the per-second part is cached).
TEST(EventLine, TimestampMatchesTheSnprintfFormat) {
  auto reference = [](const timespec& ts) {
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
    return std::string(buf);
  };
  std::vector<timespec> times = {
      {0, 0},                     // 1970-01-01T00:00:00.000000Z
      {1795297267, 123456789},    // 2026-11-21T21:41:07
      {1795297267, 999999999},    // same second, other microseconds
      {1795297268, 1000},         // the next second
      {1795297267, 5000},         // and back
      {951782400, 42000},         // 2000-02-29
      {1798761599, 999999000},    // 2026-12-31T23:59:59
      {1798761600, 0},            // 2027-01-01
      {253402300799, 999999999},  // 9999-12-31T23:59:59.999999Z
  };
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    times.push_back(
        {static_cast<time_t>(rng() % 253402300800u), static_cast<long>(rng() % 1000000000u)});
  }
  for (const auto& ts : times) {
    std::array<char, 27> buf;
    EXPECT_EQ(std::string(record::format_rfc3339(ts, buf)), reference(ts))
        << ts.tv_sec << " " << ts.tv_nsec;
  }
  std::array<char, 27> buf;
  EXPECT_TRUE(record::format_rfc3339({253402300800, 0}, buf).empty())
      << "year 10000 has five digits";
}

}  // namespace
}  // namespace cordon::netproxy
