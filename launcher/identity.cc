// Choosing the sandbox's user and its home, from the host facts and the workspace's owner.
#include "launcher/identity.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <vector>

namespace cordon::launcher {
namespace {

std::optional<HostFacts::UserEntry> lookup_user(const HostFacts& host, uid_t uid) {
  if (host.user_of) {
    return host.user_of(uid);
  }
  struct passwd pw;
  struct passwd* res = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) != 0 || res == nullptr) {
    return std::nullopt;
  }
  HostFacts::UserEntry e;
  e.name = res->pw_name != nullptr ? res->pw_name : "";
  e.home = res->pw_dir != nullptr && res->pw_dir[0] == '/' ? res->pw_dir : "";
  return e;
}

// "/home/u/" and "/home/u" are one home; a home that resolves through a symlink is named by
// its real path, as the mounts will see it.
std::string normal_home(const std::string& h) {
  if (h.empty() || h[0] != '/') {
    return {};
  }
  char buf[PATH_MAX];
  if (::realpath(h.c_str(), buf) != nullptr) {
    return buf;
  }
  std::string out = h;
  while (out.size() > 1 && out.back() == '/') {
    out.pop_back();
  }
  return out;
}

bool host_root(const HostFacts& host) { return host.euid == 0 && host.uid0_is_host_root; }

IdPlan choose_ids(const HostFacts& host, const struct stat& ws) {
  IdPlan ids;
  if (!host_root(host)) {
    // Rootless (or "root" of a user namespace that is no host root): the invoking user maps
    // itself; an unprivileged id like 65534 is usually not even mapped there.
    ids.rootless = true;
    ids.uid = host.euid;
    ids.gid = host.egid;
    return ids;
  }
  // As root the sandbox must never be host uid 0: pick the user who invoked sudo, else the
  // workspace's owner, else nobody.
  ids.rootless = false;
  if (host.sudo_uid && *host.sudo_uid != 0) {
    ids.uid = *host.sudo_uid;
    ids.gid = host.sudo_gid && *host.sudo_gid != 0 ? *host.sudo_gid : 65534;
  } else if (ws.st_uid != 0) {
    ids.uid = ws.st_uid;
    ids.gid = ws.st_gid != 0 ? ws.st_gid : 65534;
  } else {
    ids.uid = 65534;
    ids.gid = 65534;
    ids.nobody = true;
  }
  return ids;
}

}  // namespace

std::string invoking_home(const HostFacts& host) {
  if (host_root(host) && host.sudo_uid && *host.sudo_uid != 0) {
    if (auto u = lookup_user(host, *host.sudo_uid); u && !u->home.empty()) {
      return normal_home(u->home);
    }
  }
  if (!host.home.empty() && host.home[0] == '/') {
    return normal_home(host.home);
  }
  if (auto u = lookup_user(host, host.euid); u && !u->home.empty()) {
    return normal_home(u->home);
  }
  return {};
}

Identity choose_identity(const HostFacts& host, const struct stat& workspace) {
  Identity id;
  id.ids = choose_ids(host, workspace);
  std::string invoking = invoking_home(host);
  auto user = lookup_user(host, id.ids.uid);
  if (user) {
    id.user = user->name;
  }
  // Rootless the sandbox's user is the invoking one, whose $HOME is the one to honour (it may
  // differ from the user database's on purpose). As root it is another user: their own home.
  if (!id.ids.rootless && user && !user->home.empty()) {
    id.home = normal_home(user->home);
  } else {
    id.home = invoking;
  }
  for (const std::string& h : {invoking, normal_home(host.home)}) {
    if (!h.empty() && h != "/" && h != id.home &&
        std::find(id.other_homes.begin(), id.other_homes.end(), h) == id.other_homes.end()) {
      id.other_homes.push_back(h);
    }
  }
  return id;
}

}  // namespace cordon::launcher
