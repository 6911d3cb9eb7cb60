// Textual insertion into a JSON-with-comments policy: a small scanner records where each object
// member and array element lies, and the additions are spliced in at those offsets.
#include "launcher/commands/policy_patch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/replace_file.h"
#include "launcher/identity.h"
#include "launcher/sandbox/landlock.h"
#include "launcher/sandbox/seccomp.h"
#include "policy/loader.h"

namespace cordon::launcher {
namespace {

constexpr int kMaxDepth = 64;  // a policy is a few levels deep; deeper text is refused

// Where a JSON value lies in the text. Objects keep their members; arrays their element count and
// the end of the last element.
struct Node {
  char type = 0;              // '{', '[', or 'v' for any scalar
  size_t begin = 0, end = 0;  // [begin, end): end is just past the closing bracket
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> members;
  size_t elements = 0;
  size_t last_end = 0;

  Node* member(const std::string& key) const {
    for (const auto& [k, n] : members) {
      if (k == key) {
        return n.get();
      }
    }
    return nullptr;
  }
};

class Scanner {
 public:
  explicit Scanner(std::string_view t) : t_(t) {}

  Result<std::unique_ptr<Node>> document() {
    auto n = std::make_unique<Node>();
    if (auto s = value(*n, 0); !s.ok()) {
      return std::move(s).error();
    }
    skip();
    if (i_ != t_.size()) {
      return fail("text after the policy's object");
    }
    if (n->type != '{') {
      return make_error("the policy is not a JSON object");
    }
    return n;
  }

 private:
  Error fail(const std::string& what) const {
    return make_error("offset " + std::to_string(i_) + ": " + what);
  }

  // Whitespace and comments, as the loader (nlohmann with ignore_comments) skips them.
  void skip() {
    while (i_ < t_.size()) {
      char c = t_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else if (t_.compare(i_, 2, "//") == 0) {
        size_t nl = t_.find('\n', i_);
        i_ = nl == std::string_view::npos ? t_.size() : nl + 1;
      } else if (t_.compare(i_, 2, "/*") == 0) {
        size_t close = t_.find("*/", i_ + 2);
        i_ = close == std::string_view::npos ? t_.size() : close + 2;
      } else {
        return;
      }
    }
  }

  Result<std::string> string() {
    std::string out;
    ++i_;  // the opening quote
    while (i_ < t_.size() && t_[i_] != '"') {
      if (t_[i_] == '\\') {
        ++i_;  // an escape: keys we look for have none, so keep it raw
      }
      if (i_ < t_.size()) {
        out += t_[i_++];
      }
    }
    if (i_ >= t_.size()) {
      return fail("unterminated string");
    }
    ++i_;
    return out;
  }

  Status value(Node& n, int depth) {
    if (depth > kMaxDepth) {
      return fail("nested too deeply");
    }
    skip();
    if (i_ >= t_.size()) {
      return fail("unexpected end");
    }
    n.begin = i_;
    char c = t_[i_];
    if (c == '{' || c == '[') {
      n.type = c;
      return container(n, depth);
    }
    n.type = 'v';
    if (c == '"') {
      if (auto s = string(); !s.ok()) {
        return std::move(s).error();
      }
    } else {
      while (i_ < t_.size() &&
             std::string_view(",]} \t\r\n/").find(t_[i_]) == std::string_view::npos) {
        ++i_;
      }
      if (i_ == n.begin) {
        return fail("expected a value");
      }
    }
    n.end = i_;
    return {};
  }

  Status container(Node& n, int depth) {
    const char close = n.type == '{' ? '}' : ']';
    ++i_;
    skip();
    if (i_ < t_.size() && t_[i_] == close) {
      n.end = ++i_;
      return {};
    }
    while (true) {
      auto child = std::make_unique<Node>();
      std::string key;
      if (n.type == '{') {
        skip();
        if (i_ >= t_.size() || t_[i_] != '"') {
          return fail("expected a key");
        }
        auto k = string();
        if (!k.ok()) {
          return std::move(k).error();
        }
        key = *k;
        skip();
        if (i_ >= t_.size() || t_[i_] != ':') {
          return fail("expected ':'");
        }
        ++i_;
      }
      if (auto s = value(*child, depth + 1); !s.ok()) {
        return s;
      }
      n.last_end = child->end;
      ++n.elements;
      if (n.type == '{') {
        n.members.emplace_back(std::move(key), std::move(child));
      }
      skip();
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < t_.size() && t_[i_] == close) {
        n.end = ++i_;
        return {};
      }
      return fail(std::string("expected ',' or '") + close + "'");
    }
  }

  std::string_view t_;
  size_t i_ = 0;
};

std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out;
}

// "    // why\n    \"entry\"" for each addition, separated by commas.
std::string elements_text(const std::vector<const PolicyAddition*>& adds, const std::string& in) {
  std::string out;
  for (size_t i = 0; i < adds.size(); ++i) {
    out += (i == 0 ? "\n" : ",\n") + in + "// " + one_line(adds[i]->comment) + "\n" + in +
           nlohmann::json(adds[i]->entry).dump();
  }
  return out;
}

struct Splice {
  size_t at;
  std::string text;
};

// New members ("key": [...]), comma-separated, each on its own line at indent `in`.
std::string new_members(const std::map<std::string, std::vector<const PolicyAddition*>>& by_key,
                        const std::string& in) {
  std::string out;
  for (const auto& [key, adds] : by_key) {
    out += (out.empty() ? "\n" : ",\n") + in + nlohmann::json(key).dump() + ": [" +
           elements_text(adds, in + "  ") + "\n" + in + "]";
  }
  return out;
}

// Members go after the object's last member (so a file's opening comment stays first), or into
// an empty object.
Splice append_members(const Node& object, const std::string& members, const std::string& in) {
  if (object.elements == 0) {
    return {object.begin + 1, members + "\n" + in};
  }
  return {object.last_end, "," + members};
}

}  // namespace

Result<std::string> add_to_policy_text(std::string_view text,
                                       const std::vector<PolicyAddition>& additions) {
  auto doc = Scanner(text).document();
  if (!doc.ok()) {
    return std::move(doc).error().with_context("reading the policy's text");
  }
  // section -> list -> additions (every policy list sits one level down: network.allow, ...).
  std::map<std::string, std::map<std::string, std::vector<const PolicyAddition*>>> plan;
  for (const auto& a : additions) {
    size_t dot = a.field.find('.');
    if (dot == std::string::npos || a.field.find('.', dot + 1) != std::string::npos) {
      return make_error("cannot add to \"" + a.field + "\": not a section.list field");
    }
    plan[a.field.substr(0, dot)][a.field.substr(dot + 1)].push_back(&a);
  }
  const Node& root = **doc;
  std::vector<Splice> splices;
  std::map<std::string, std::string> new_sections;  // section -> its members' text
  for (const auto& [section, lists] : plan) {
    const Node* sec = root.member(section);
    if (sec == nullptr) {
      new_sections[section] = new_members(lists, "    ");
      continue;
    }
    if (sec->type != '{') {
      return make_error(section + " is not an object");
    }
    std::map<std::string, std::vector<const PolicyAddition*>> missing;
    for (const auto& [list, adds] : lists) {
      const Node* arr = sec->member(list);
      if (arr == nullptr) {
        missing[list] = adds;
      } else if (arr->type != '[') {
        return make_error(section + "." + list + " is not a list");
      } else if (arr->elements == 0) {
        splices.push_back({arr->begin + 1, elements_text(adds, "    ") + "\n  "});
      } else {
        splices.push_back({arr->last_end, "," + elements_text(adds, "    ")});
      }
    }
    if (!missing.empty()) {
      splices.push_back(append_members(*sec, new_members(missing, "    "), "  "));
    }
  }
  if (!new_sections.empty()) {
    std::string members;
    for (const auto& [section, body] : new_sections) {
      members += (members.empty() ? "\n  " : ",\n  ") + nlohmann::json(section).dump() + ": {" +
                 body + "\n  }";
    }
    splices.push_back(append_members(root, members, ""));
  }
  // From the end backwards, so every recorded offset still holds when it is used.
  std::sort(splices.begin(), splices.end(),
            [](const Splice& a, const Splice& b) { return a.at > b.at; });
  std::string out(text);
  for (const auto& s : splices) {
    out.insert(s.at, s.text);
  }
  return out;
}

namespace {

constexpr size_t kMaxPolicyBytes = 1u << 20;
// A new policy file when FILE does not exist yet.
constexpr char kFreshPolicy[] = "{\n  \"version\": 1\n}\n";

Result<std::string> read_policy_text(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) {
      return std::string(kFreshPolicy);
    }
    return sys_error("open(\"" + file + "\")");
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().size() > kMaxPolicyBytes) {
    return make_error(file + ": larger than a policy can be (1 MiB)");
  }
  return s.str();
}

// Replaces `file` with `text` in one rename (a crash leaves the old policy or the new one),
// keeping an existing file's mode and, as root, its owner: `sudo cordon run --ask --policy
// ~/p.json` leaves the file its owner's.
Status write_policy_text(const std::string& file, const std::string& text) {
  struct stat st {};
  ReplaceOptions o;
  if (::stat(file.c_str(), &st) == 0) {
    o.mode = st.st_mode & 07777;
    if (::geteuid() == 0) {
      o.uid = st.st_uid;
      o.gid = st.st_gid;
    }
  }
  return replace_file(file, text, o);
}

}  // namespace

Status validate_for_run(const policy::Policy& p) {
  if (auto s = compile_seccomp(p.process.seccomp, {p.process.nested_sandbox, true}); !s.ok()) {
    return std::move(s).error().with_context("seccomp");
  }
  if (auto e = exec_allow_paths(p.process, "/workspace"); !e.ok()) {
    return std::move(e).error();
  }
  return {};
}

Status add_to_policy_file(const std::string& file, const std::vector<PolicyAddition>& adds) {
  ASSIGN_OR_RETURN(std::string before, read_policy_text(file));
  auto after = add_to_policy_text(before, adds);
  if (!after.ok()) {
    return std::move(after).error().with_context(file);
  }
  try {
    policy::LoadOptions lo;
    lo.home = invoking_home(HostFacts::current());
    lo.source_name = file;
    policy::Policy p = policy::parse_policy(*after, lo);
    if (auto s = validate_for_run(p); !s.ok()) {
      return std::move(s).error().with_context(file + " with the additions");
    }
  } catch (const policy::PolicyError& e) {
    return make_error(std::string("with the additions, ") + e.what(),
                      "the file was left unchanged");
  }
  return write_policy_text(file, *after);
}

}  // namespace cordon::launcher
