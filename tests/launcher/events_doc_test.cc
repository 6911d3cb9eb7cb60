// docs/events.md against the code: every event kind any component emits (emit("kind", ...),
// EventLine ev("kind"), {"kind", "kind"}, the shim's kind names) is documented there.
#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/support/test_env.h"

namespace {

using cordon::testing::source_path;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_source(const std::string& name) {
  auto ends = [&](const char* s) {
    std::string e(s);
    return name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  return ends(".cc") || ends(".h") || ends(".c");
}

void sources_under(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return;
  }
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") {
      continue;
    }
    std::string path = dir + "/" + name;
    if (e->d_type == DT_DIR) {
      sources_under(path, out);
    } else if (is_source(name)) {
      out.push_back(path);
    }
  }
  ::closedir(d);
}

// The kinds the code writes, by the forms writers use.
std::set<std::string> emitted_kinds() {
  static const std::regex kForms[] = {
      std::regex(R"re(emit\(\s*"([a-z]+\.[a-z_]+)")re"),
      std::regex(R"re(EventLine\s+\w+\(\s*"([a-z]+\.[a-z_]+)")re"),
      std::regex(R"re(\{"kind",\s*"([a-z]+\.[a-z_]+)"\})re"),
      std::regex(R"re(put\(\s*"([a-z]+\.[a-z_]+)")re"),
  };
  // The shim's wire kinds become names in one switch.
  static const std::regex kShimName(R"re(return "([a-z]+\.[a-z_]+)";)re");
  std::set<std::string> kinds;
  for (const char* component :
       {"launcher", "netproxy", "fusefs", "preload_shim", "policy", "record", "base"}) {
    std::vector<std::string> files;
    sources_under(source_path(component), files);
    for (const auto& f : files) {
      std::string text = slurp(f);
      for (const auto& re : kForms) {
        for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
          kinds.insert((*it)[1]);
        }
      }
      if (f.find("preload_shim/collector/decode.cc") != std::string::npos) {
        for (std::sregex_iterator it(text.begin(), text.end(), kShimName), end; it != end; ++it) {
          kinds.insert((*it)[1]);
        }
      }
    }
  }
  return kinds;
}

TEST(EventsDoc, EveryKindTheCodeEmitsIsDocumented) {
  std::set<std::string> kinds = emitted_kinds();
  // The scan itself must see the writers: a few kinds from each component.
  for (const char* k :
       {"session.start", "session.end", "net.connect", "net.http", "net.dns", "fs.refused",
        "fs.quota", "proc.exec", "shim.hello", "record.dropped", "limit.hit", "env.refused"}) {
    EXPECT_TRUE(kinds.count(k)) << "the scan no longer finds " << k;
  }
  std::string doc = slurp(source_path("docs/events.md"));
  ASSERT_FALSE(doc.empty());
  for (const auto& k : kinds) {
    EXPECT_NE(doc.find("`" + k + "`"), std::string::npos)
        << k << " is emitted by the code but not documented in docs/events.md";
  }
}

TEST(EventsDoc, CommonFieldsVersionAndChainAreDocumented) {
  std::string doc = slurp(source_path("docs/events.md"));
  for (const char* f : {"`ts`", "`session`", "`source`", "`kind`", "`v`", "`chain`", "`decision`",
                        "`rule`", "--verify", "--events-to", "--follow"}) {
    EXPECT_NE(doc.find(f), std::string::npos) << f;
  }
}

}  // namespace
