// Deny entries of an imported file, put in cordon's syntax without denying less.
#include "policy/import/deny_entries.h"

#include <sys/stat.h>

#include <algorithm>

#include "policy/host_pattern.h"

namespace cordon::policy::import {
namespace {

bool fail(std::string* why, std::string msg) {
  if (why != nullptr) {
    *why = std::move(msg);
  }
  return false;
}

std::string trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) {
    return {};
  }
  return std::string(s.substr(first, s.find_last_not_of(kSpace) - first + 1));
}

// A URL, or a name with a path, denies its host on every port: a deny wider than the URL's own
// port only refuses more.
std::optional<std::string> deny_host(const std::string& value, std::string* why) {
  std::string v = trim(value);
  if (size_t sep = v.find("://"); sep != std::string::npos) {
    std::string rest = v.substr(sep + 3);
    rest = rest.substr(0, rest.find_first_of("/?#"));
    if (size_t at = rest.rfind('@'); at != std::string::npos) {
      rest = rest.substr(at + 1);
    }
    if (!rest.empty() && rest.front() == '[') {
      rest = rest.substr(0, rest.find(']') + 1);  // "[::1]:443" -> "[::1]"
    } else if (std::count(rest.begin(), rest.end(), ':') == 1) {
      rest.resize(rest.find(':'));
    }
    v = rest;
  } else if (size_t slash = v.find('/'); slash != std::string::npos) {
    // "10.0.0.0/8" is a range; "exfil.example/upload" is a name with a path.
    if (!IpAddress::parse(v.substr(0, slash))) {
      v.resize(slash);
    }
  }
  if (v.size() > 2 && v.front() == '[' && v.back() == ']') {
    v = v.substr(1, v.size() - 2);
  }
  std::transform(v.begin(), v.end(), v.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  if (v.size() > 1 && v.back() == '.') {
    v.pop_back();  // the root's dot: the same name
  }
  if (v.empty()) {
    fail(why, "no host name is left of it");
    return std::nullopt;
  }
  return v;
}

bool is_symlink(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// ".." resolved lexically where the kernel would resolve it the same way: `name/..` is the
// directory holding `name` only when `name` is not a symlink (a symlink's ".." is its target's
// parent), and a glob before ".." stands for names that cannot all be checked.
std::optional<std::string> without_dotdot(const std::string& path, const std::string& home,
                                          std::string* why) {
  std::string with_slash = "/" + path + "/";
  if (with_slash.find("/../") == std::string::npos) {
    return path;
  }
  std::string base, host_base, rest;
  if (path == "~" || path.rfind("~/", 0) == 0) {
    if (home.empty() || home.front() != '/') {
      fail(why, "\"~\" cannot be checked: $HOME is not an absolute path");
      return std::nullopt;
    }
    base = "~";
    host_base = home;
    rest = path.substr(1);
  } else if (!path.empty() && path.front() == '/') {
    rest = path;
  } else {
    fail(why,
         "a \"..\" in a workspace-relative path depends on the workspace's own symlinks, which "
         "the import cannot see");
    return std::nullopt;
  }
  std::vector<std::string> kept;
  size_t at = 0;
  while (at <= rest.size()) {
    size_t slash = rest.find('/', at);
    std::string seg = rest.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    at = slash == std::string::npos ? rest.size() + 1 : slash + 1;
    if (seg.empty() || seg == ".") {
      continue;
    }
    if (seg != "..") {
      kept.push_back(seg);
      continue;
    }
    if (kept.empty()) {
      if (base == "~") {
        fail(why, "its \"..\" climbs above \"~\"");
        return std::nullopt;
      }
      continue;  // "/.." is "/"
    }
    if (kept.back().find_first_of("*?[") != std::string::npos) {
      fail(why, "its \"..\" follows the pattern segment \"" + kept.back() + "\"");
      return std::nullopt;
    }
    std::string host = host_base;
    for (const auto& k : kept) {
      host += "/" + k;
    }
    if (is_symlink(host)) {
      fail(why, host + " is a symlink on this host, so \"" + kept.back() +
                    "/..\" is not the directory that holds it");
      return std::nullopt;
    }
    kept.pop_back();
  }
  std::string out = base;
  for (const auto& k : kept) {
    out += "/" + k;
  }
  return out.empty() ? "/" : out;
}

}  // namespace

bool is_deny_list(std::string_view list_path) {
  return std::find(std::begin(kDenyLists), std::end(kDenyLists), list_path) != std::end(kDenyLists);
}

std::optional<std::vector<std::string>> normalise_deny(std::string_view list_path,
                                                       const std::string& value,
                                                       const std::string& home, std::string* why) {
  if (list_path == "network.deny") {
    auto host = deny_host(value, why);
    if (!host) {
      return std::nullopt;
    }
    return std::vector<std::string>{*host};
  }
  std::string trimmed = trim(value);
  if (trimmed.empty()) {
    fail(why, "it is empty or only spaces");
    return std::nullopt;
  }
  if (list_path == "process.env.deny") {
    return std::vector<std::string>{trimmed};
  }
  auto resolved = without_dotdot(trimmed, home, why);
  if (!resolved) {
    return std::nullopt;
  }
  std::vector<std::string> out{*resolved};
  // A file name may end in a space: the path as written stays denied next to the trimmed one
  // the file most likely meant (unless it has a ".." the trimmed form already resolved).
  if (value != trimmed && ("/" + value + "/").find("/../") == std::string::npos) {
    out.insert(out.begin(), value);
  }
  return out;
}

}  // namespace cordon::policy::import
