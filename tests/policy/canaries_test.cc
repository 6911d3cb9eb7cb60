// "canaries" and network.on_exfil in the policy: the default, the accepted forms, the errors
// naming the field, the round trip through policy.json and the words of `policy explain`.
#include <gtest/gtest.h>

#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::policy {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_policy(text);
  } catch (const PolicyError& e) {
    return e.what();
  }
  ADD_FAILURE() << text << " was accepted";
  return "";
}

TEST(Canaries, AllAreOnByDefaultAndTheFormsAreReadAsWritten) {
  EXPECT_EQ(parse_policy("{}").canaries,
            (std::vector<std::string>{"aws", "ssh", "dotenv", "github"}));
  EXPECT_EQ(parse_policy(R"({"canaries": true})").canaries, default_canaries());
  EXPECT_TRUE(parse_policy(R"({"canaries": false})").canaries.empty());
  EXPECT_EQ(parse_policy(R"({"canaries": ["ssh", "aws"]})").canaries,
            (std::vector<std::string>{"ssh", "aws"}));
  EXPECT_FALSE(parse_policy("{}").network.kill_on_exfil);
  EXPECT_FALSE(parse_policy(R"({"network": {"on_exfil": "refuse"}})").network.kill_on_exfil);
  EXPECT_TRUE(parse_policy(R"({"network": {"on_exfil": "kill"}})").network.kill_on_exfil);
}

TEST(Canaries, BadValuesAreErrorsNamingTheField) {
  EXPECT_NE(error_of(R"({"canaries": ["aws", "gcp"]})").find("canaries[1]"), std::string::npos);
  EXPECT_NE(error_of(R"({"canaries": ["aws", "gcp"]})").find("\"gcp\" is not a canary"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"canaries": ["aws", "aws"]})").find("named twice"), std::string::npos);
  EXPECT_NE(error_of(R"({"canaries": "aws"})").find("canaries"), std::string::npos);
  EXPECT_NE(error_of(R"({"network": {"on_exfil": "ignore"}})").find("network.on_exfil"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"on_exfil": "kill"})").find("network"), std::string::npos);
}

TEST(Canaries, RoundTripThroughThePolicyRecordAndExplainInWords) {
  for (const char* text : {R"({"canaries": false, "network": {"on_exfil": "kill"}})",
                           R"({"canaries": ["dotenv"]})", "{}"}) {
    Policy p = parse_policy(text);
    EXPECT_EQ(parse_policy(to_json(p).dump()), p) << text;
  }
  EXPECT_FALSE(to_json(parse_policy("{}")).contains("canaries"));
  const std::string off = explain(parse_policy(R"({"canaries": false})"));
  EXPECT_NE(off.find("canaries: none planted (canaries: false)"), std::string::npos) << off;
  const std::string on = explain(parse_policy(R"({"network": {"on_exfil": "kill"}})"));
  EXPECT_NE(on.find("canaries: decoy secrets unique to the session are planted in the "
                    "sandbox's view only (aws, ssh, dotenv, github;"),
            std::string::npos)
      << on;
  EXPECT_NE(on.find("also ends the session, exit status 123 (network.on_exfil: kill)"),
            std::string::npos)
      << on;
}

}  // namespace
}  // namespace cordon::policy
