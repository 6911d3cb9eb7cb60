// add_to_policy_text: entries land in the right list, the rest of the text (comments included)
// is kept byte for byte, and the result is a policy the loader accepts with the entries in place.
#include "launcher/commands/policy_patch.h"

#include <gmock/gmock.h>

#include "policy/loader.h"

namespace cordon::launcher {
namespace {

using ::testing::HasSubstr;

policy::Policy load(const std::string& text) {
  policy::LoadOptions lo;
  lo.home = "/home/u";
  return policy::parse_policy(text, lo);
}

TEST(PolicyPatch, AppendsToExistingListsKeepingComments) {
  const std::string before = R"({
  // mine
  "version": 1,
  "network": {"allow": ["a.test:1", /* second */ "b.test:2"] /* after */},
  "filesystem": {"read": []}
}
)";
  auto after = add_to_policy_text(before, {{"network.allow", "c.test:3", "why c"},
                                           {"filesystem.read", "/srv/x", "why x"},
                                           {"network.allow", "d.test:4", "why d"}});
  ASSERT_TRUE(after.ok()) << after.error().to_string();
  EXPECT_THAT(*after, HasSubstr("// mine"));
  EXPECT_THAT(*after, HasSubstr("/* second */"));
  EXPECT_THAT(*after, HasSubstr("/* after */"));
  EXPECT_THAT(*after, HasSubstr("// why c\n"));
  policy::Policy p = load(*after);
  ASSERT_EQ(p.network.allow.size(), 4u) << *after;
  EXPECT_EQ(p.network.allow[2].text, "c.test:3");
  EXPECT_EQ(p.network.allow[3].text, "d.test:4");
  ASSERT_EQ(p.filesystem.read.size(), 1u) << *after;
  EXPECT_EQ(p.filesystem.read[0].text, "/srv/x");
}

TEST(PolicyPatch, AddsMissingListsAndSections) {
  for (const std::string before : {"{}", "{\"version\": 1}", "{\"network\": {}}",
                                   "{\"network\": {\"max_connections\": 8}} // end"}) {
    auto after = add_to_policy_text(before, {{"network.allow", "c.test:3", "why"},
                                             {"process.exec_allow", "/usr/bin/git", "why"}});
    ASSERT_TRUE(after.ok()) << before << ": " << after.error().to_string();
    policy::Policy p = load(*after);
    ASSERT_EQ(p.network.allow.size(), 1u) << *after;
    EXPECT_EQ(p.network.allow[0].text, "c.test:3");
    ASSERT_EQ(p.process.exec_allow.size(), 1u) << *after;
    EXPECT_EQ(p.process.exec_allow[0].text, "/usr/bin/git");
  }
}

TEST(PolicyPatch, AStringThatLooksLikeSyntaxStaysAString) {
  auto after = add_to_policy_text(
      R"({"network": {"allow": ["x.test:1"], "resolve": {"a]//b": "127.0.0.1"}}})",
      {{"network.allow", "y.test:2", "a comment with \"quotes\"\nand a newline"}});
  ASSERT_TRUE(after.ok()) << after.error().to_string();
  auto j = nlohmann::json::parse(*after, nullptr, false, /*ignore_comments=*/true);
  ASSERT_FALSE(j.is_discarded()) << *after;
  EXPECT_EQ(j["network"]["allow"], nlohmann::json({"x.test:1", "y.test:2"})) << *after;
  EXPECT_TRUE(j["network"]["resolve"].contains("a]//b"));
}

TEST(PolicyPatch, RefusesWhatIsNotAPolicyShape) {
  EXPECT_FALSE(add_to_policy_text("[1]", {{"network.allow", "x", "w"}}).ok());
  EXPECT_FALSE(add_to_policy_text("{\"network\": [1]}", {{"network.allow", "x", "w"}}).ok());
  EXPECT_FALSE(
      add_to_policy_text("{\"network\": {\"allow\": 3}}", {{"network.allow", "x", "w"}}).ok());
  EXPECT_FALSE(
      add_to_policy_text("{\"network\": {\"allow\": [\"x\"", {{"network.allow", "y", "w"}}).ok());
}

}  // namespace
}  // namespace cordon::launcher
