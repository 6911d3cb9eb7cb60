// The decider protocol's lines (netproxy/decider_wire.h): the question's JSON and the strict
// reply parser, on the replies a decider may send, well-formed or not.
#include "netproxy/decider_wire.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cordon::netproxy {
namespace {

TEST(DeciderWire, QuestionIsOneJsonLineWithTheConnectionDetails) {
  DeciderQuestion q;
  q.id = 9;
  q.host = "api.example.com";
  q.port = 443;
  q.mode = "connect";
  q.client = "10.0.0.2:5555";
  auto line = question_line(q);
  ASSERT_EQ(line.back(), '\n');
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"v":1,"id":9,"kind":"connect","host":"api.example.com",
    "port":443,"mode":"connect","client":"10.0.0.2:5555"})"));
  // Bytes that are not UTF-8 in a name still make one line of valid JSON.
  q.host = std::string("a\xff\n.test");
  line = question_line(q);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded());
}

TEST(DeciderWire, ParsesAllowDenyAndScope) {
  auto once = parse_decider_reply(R"({"id":1,"decision":"allow"})");
  ASSERT_TRUE(once.ok()) << once.error().message;
  EXPECT_EQ(once->id, 1u);
  EXPECT_TRUE(once->allow);
  EXPECT_FALSE(once->session);
  auto session = parse_decider_reply(R"({"v":1,"id":2,"decision":"allow","scope":"session",
                                         "later_field":[1,2]})");
  ASSERT_TRUE(session.ok()) << session.error().message;
  EXPECT_TRUE(session->session);
  auto deny = parse_decider_reply(R"({"id":3,"decision":"deny","reason":"ask first"})");
  ASSERT_TRUE(deny.ok());
  EXPECT_FALSE(deny->allow);
  EXPECT_EQ(deny->reason, "ask first");
}

TEST(DeciderWire, RefusesWhatIsNotAValidReply) {
  for (const char* bad :
       {"", "not json", "[1]", R"({"decision":"allow"})", R"({"id":0,"decision":"allow"})",
        R"({"id":-4,"decision":"allow"})", R"({"id":"4","decision":"allow"})",
        R"({"id":4,"decision":"yes"})", R"({"id":4})",
        R"({"id":4,"decision":"allow","scope":"forever"})",
        R"({"id":4,"decision":"deny","reason":7})", R"({"v":2,"id":4,"decision":"allow"})"}) {
    EXPECT_FALSE(parse_decider_reply(bad).ok()) << bad;
  }
  EXPECT_EQ(reply_id_hint(R"({"id":4,"decision":"yes"})"), 4u);
  EXPECT_EQ(reply_id_hint("not json"), 0u);
  EXPECT_FALSE(parse_decider_reply(std::string(kMaxDeciderLine + 1, ' ')).ok());
}

TEST(DeciderWire, ReasonIsCutAndFreeOfControlCharacters) {
  auto r = parse_decider_reply(R"({"id":1,"decision":"deny","reason":"a\u001b[2Jb\nc"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reason, "a [2Jb c");
  // 600 two-byte characters: cut at 512 bytes, never inside a character.
  std::string long_reason;
  for (int i = 0; i < 600; ++i) {
    long_reason += "\xc3\xa9";
  }
  auto cut = parse_decider_reply(R"({"id":1,"decision":"deny","reason":")" + long_reason + "\"}");
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->reason.size(), kMaxDeciderReason);
  EXPECT_EQ(cut->reason, long_reason.substr(0, kMaxDeciderReason));
}

// The asker's side (`cordon run --ask`): it reads what question_line() writes and writes what
// parse_decider_reply() reads, so the two ends share one protocol.
TEST(DeciderWire, QuestionsRoundTripAndRepliesParseBack) {
  DeciderQuestion q;
  q.id = 9;
  q.host = "asked.test";
  q.port = 8443;
  q.mode = "transparent";
  q.client = "10.79.0.2:5000";
  q.sni = "asked.test";
  std::string line = question_line(q);
  line.pop_back();  // the '\n'
  auto back = parse_decider_question(line);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->id, 9u);
  EXPECT_EQ(back->kind, "connect");
  EXPECT_EQ(back->host, "asked.test");
  EXPECT_EQ(back->port, 8443);
  EXPECT_EQ(back->mode, "transparent");
  EXPECT_EQ(back->client, "10.79.0.2:5000");
  EXPECT_EQ(back->sni, "asked.test");
  EXPECT_TRUE(back->method.empty());
  EXPECT_TRUE(back->process.empty());
  for (const char* bad :
       {"", "[]", R"({"id":1,"kind":"connect","host":"a"})",
        R"({"v":1,"kind":"connect","host":"a"})", R"({"v":1,"id":1,"kind":"exec","host":"a"})",
        R"({"v":1,"id":1,"kind":"connect"})",
        R"({"v":1,"id":1,"kind":"connect","host":"a","port":70000})",
        R"({"v":1,"id":1,"kind":"connect","host":5})"}) {
    EXPECT_FALSE(parse_decider_question(bad).ok()) << bad;
  }
  DeciderReply r;
  r.id = 9;
  r.allow = false;
  r.session = true;
  r.reason = "no\x1b[2J";
  std::string reply = reply_line(r);
  ASSERT_EQ(reply.back(), '\n');
  reply.pop_back();
  auto parsed = parse_decider_reply(reply);
  ASSERT_TRUE(parsed.ok()) << reply;
  EXPECT_EQ(parsed->id, 9u);
  EXPECT_FALSE(parsed->allow);
  EXPECT_TRUE(parsed->session);
  EXPECT_EQ(parsed->reason, "no [2J");
}

// Optional fields of version 1: the request when it was read before the question, and the
// process chain; a decider that knows nothing of them still reads the line.
TEST(DeciderWire, MethodPathAndProcessChainRoundTrip) {
  DeciderQuestion q;
  q.id = 3;
  q.host = "asked.test";
  q.port = 80;
  q.mode = "http";
  q.method = "POST";
  q.path = "/upload?x=1";
  q.process = {{7, "/usr/bin/curl", {"curl", "-d", "@f", "http://asked.test/upload?x=1"}},
               {3, "/bin/sh", {"sh", "-c", "curl ..."}}};
  std::string line = question_line(q);
  line.pop_back();
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/upload?x=1");
  EXPECT_EQ(j["process"]["pid"], 7);
  EXPECT_EQ(j["process"]["exe"], "/usr/bin/curl");
  EXPECT_EQ(j["process"]["argv"].size(), 4u);
  ASSERT_EQ(j["parents"].size(), 1u);
  EXPECT_EQ(j["parents"][0]["pid"], 3);
  auto back = parse_decider_question(line);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->method, "POST");
  EXPECT_EQ(back->path, "/upload?x=1");
  ASSERT_EQ(back->process.size(), 2u);
  EXPECT_EQ(back->process[0].pid, 7);
  EXPECT_EQ(back->process[0].argv.at(3), "http://asked.test/upload?x=1");
  EXPECT_EQ(back->process[1].exe, "/bin/sh");
  // A malformed entry ends the chain there; the question still stands.
  auto partial = parse_decider_question(
      R"({"v":1,"id":4,"kind":"connect","host":"a","process":{"pid":7,"argv":["x"]},)"
      R"("parents":[{"pid":3,"argv":["sh"]},{"pid":"2"},{"pid":1,"argv":[]}]})");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->process.size(), 2u);
  // Without a process there are no parents.
  auto none = parse_decider_question(
      R"({"v":1,"id":5,"kind":"connect","host":"a","parents":[{"pid":3,"argv":["sh"]}]})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->process.empty());
}

}  // namespace
}  // namespace cordon::netproxy
