// The connecting process: socket inode from /proc/INIT/net/{tcp,udp}{,6}, its holder from the
// fds of the sandbox's processes, the chain from their parent pids.
#include "netproxy/client_process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>

#include "base/unique_fd.h"

namespace cordon::netproxy {
namespace {

using Clock = std::chrono::steady_clock;

// Reads at most `max` bytes of a /proc file; empty when it cannot be opened.
std::string read_proc(const std::string& path, size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out;
  if (!fd) {
    return out;
  }
  char buf[8192];
  while (out.size() < max) {
    ssize_t k = ::read(fd.get(), buf, std::min(sizeof buf, max - out.size()));
    if (k <= 0) {
      break;
    }
    out.append(buf, static_cast<size_t>(k));
  }
  return out;
}

std::string read_link(const std::string& path) {
  char buf[4096];
  ssize_t k = ::readlink(path.c_str(), buf, sizeof buf);
  return k > 0 ? std::string(buf, static_cast<size_t>(k)) : std::string();
}

// The kernel prints a socket table's local address as the address's bytes read as native 32-bit
// words ("%08X" each), then ":%04X" for the port: the same text, made from `client`, for the
// v4 table (`v4`) and the v6 one (`v6`; a v4 client there is v4-mapped).
bool table_keys(const std::string& client, std::string* v4, std::string* v6) {
  const size_t colon = client.rfind(':');
  if (colon == std::string::npos || colon + 1 >= client.size()) {
    return false;
  }
  std::string host = client.substr(0, colon);
  const unsigned long port = std::strtoul(client.c_str() + colon + 1, nullptr, 10);
  if (port == 0 || port > 65535) {
    return false;
  }
  char portx[8];
  std::snprintf(portx, sizeof portx, ":%04lX", port);
  uint8_t b6[16] = {};
  if (!host.empty() && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (::inet_pton(AF_INET6, host.c_str(), b6) != 1) {
      return false;
    }
    v4->clear();
  } else {
    uint32_t w4 = 0;
    if (::inet_pton(AF_INET, host.c_str(), &w4) != 1) {
      return false;
    }
    char x[16];
    std::snprintf(x, sizeof x, "%08X", w4);
    *v4 = std::string(x) + portx;
    b6[10] = b6[11] = 0xff;
    std::memcpy(b6 + 12, &w4, 4);
  }
  v6->clear();
  for (int i = 0; i < 4; ++i) {
    uint32_t w = 0;
    std::memcpy(&w, b6 + 4 * i, 4);
    char x[16];
    std::snprintf(x, sizeof x, "%08X", w);
    *v6 += x;
  }
  *v6 += portx;
  return true;
}

// The inode of the socket whose local address is `key` in the table `text`; 0 if none.
unsigned long inode_of(const std::string& text, const std::string& key) {
  if (key.empty()) {
    return 0;
  }
  size_t at = 0;
  for (int lines = 0; lines < 65536 && at < text.size(); ++lines) {
    size_t nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text.size() : nl + 1;
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
    char local[64] = {};
    unsigned long inode = 0;
    if (std::sscanf(line.c_str(), " %*s %63s %*s %*s %*s %*s %*s %*s %*s %lu", local, &inode) ==
            2 &&
        key == local && inode != 0) {
      return inode;
    }
  }
  return 0;
}

pid_t parent_of(pid_t pid) {
  std::string stat = read_proc("/proc/" + std::to_string(pid) + "/stat", 1024);
  // "pid (comm) state ppid ...": comm may hold anything, so the fields are read after its ')'.
  const size_t close = stat.rfind(')');
  int ppid = 0;
  if (close == std::string::npos || std::sscanf(stat.c_str() + close + 1, " %*c %d", &ppid) != 1) {
    return 0;
  }
  return ppid;
}

}  // namespace

pid_t find_sandbox_init(pid_t cordon) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) {
    return 0;
  }
  pid_t found = 0;
  for (dirent* e; found == 0 && (e = ::readdir(proc)) != nullptr;) {
    char* endp = nullptr;
    const long pid = std::strtol(e->d_name, &endp, 10);
    if (pid <= 0 || *endp != '\0') {
      continue;
    }
    const std::string dir = "/proc/" + std::string(e->d_name);
    if (parent_of(static_cast<pid_t>(pid)) == cordon &&
        read_proc(dir + "/comm", 64) == "cordon-init\n") {
      found = static_cast<pid_t>(pid);
    }
  }
  ::closedir(proc);
  return found;
}

bool read_sandbox_process(pid_t pid, SandboxProcess* out) {
  const std::string dir = "/proc/" + std::to_string(pid);
  // NSpid: this namespace's number first, the sandbox's (the innermost) last.
  std::string status = read_proc(dir + "/status", 16384);
  const size_t at = status.find("\nNSpid:");
  if (at == std::string::npos) {
    return false;
  }
  const size_t end = status.find('\n', at + 1);
  std::string nspid = status.substr(at + 7, end == std::string::npos ? end : end - at - 7);
  const size_t last = nspid.find_last_of(" \t");
  out->pid = std::strtoll(nspid.c_str() + (last == std::string::npos ? 0 : last + 1), nullptr, 10);
  out->exe = read_link(dir + "/exe");
  out->argv.clear();
  std::string cmdline = read_proc(dir + "/cmdline", SandboxProcess::kMaxArgBytes);
  for (size_t p = 0; p < cmdline.size() && out->argv.size() < SandboxProcess::kMaxArgs;) {
    size_t z = cmdline.find('\0', p);
    out->argv.push_back(cmdline.substr(p, z == std::string::npos ? std::string::npos : z - p));
    p = z == std::string::npos ? cmdline.size() : z + 1;
  }
  return out->pid > 0;
}

std::vector<SandboxProcess> find_client_process(pid_t sandbox_init, const std::string& client,
                                                bool udp, std::chrono::microseconds budget) {
  std::vector<SandboxProcess> chain;
  const auto deadline = Clock::now() + budget;
  std::string key4, key6;
  if (sandbox_init <= 0 || !table_keys(client, &key4, &key6)) {
    return chain;
  }
  const std::string init_dir = "/proc/" + std::to_string(sandbox_init);
  const std::string table = udp ? "udp" : "tcp";
  // The tables of the sandbox's network namespace: init's view of /proc/net.
  unsigned long inode = inode_of(read_proc(init_dir + "/net/" + table, 8 << 20), key4);
  if (inode == 0) {
    inode = inode_of(read_proc(init_dir + "/net/" + table + "6", 8 << 20), key6);
  }
  if (inode == 0 && udp && !key4.empty()) {
    // A UDP socket that sends without connect() is bound to the wildcard address.
    inode = inode_of(read_proc(init_dir + "/net/udp", 8 << 20),
                     "00000000" + key4.substr(key4.find(':')));
  }
  if (inode == 0) {
    return chain;
  }
  // Init is not dumpable: its namespace link may be unreadable where its children are not. Then
  // only the walk through the children files finds the sandbox's processes.
  const std::string pidns = read_link(init_dir + "/ns/pid");
  const std::string wanted = "socket:[" + std::to_string(inode) + "]";
  auto holds = [&](pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* fds = ::opendir(dir.c_str());
    if (fds == nullptr) {
      return false;
    }
    bool found = false;
    for (dirent* f; !found && (f = ::readdir(fds)) != nullptr;) {
      found = f->d_name[0] != '.' && read_link(dir + "/" + f->d_name) == wanted;
    }
    ::closedir(fds);
    return found;
  };
  pid_t holder = 0;
  // The sandbox's processes are init's descendants: walked through the children files, newest
  // first (the connecting process is most often a recent one), no other process is looked at.
  std::vector<pid_t> todo{sandbox_init};
  bool walked = false;
  for (size_t seen = 0; holder == 0 && !todo.empty() && seen < 4096; ++seen) {
    if (Clock::now() >= deadline) {
      break;
    }
    const pid_t pid = todo.back();
    todo.pop_back();
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    if (DIR* t = ::opendir(tasks.c_str())) {
      for (dirent* e; (e = ::readdir(t)) != nullptr;) {
        if (e->d_name[0] == '.') {
          continue;
        }
        std::string kids = read_proc(tasks + "/" + e->d_name + "/children", 65536);
        walked |= pid == sandbox_init && !kids.empty();
        for (size_t at = 0; at < kids.size();) {
          char* endp = nullptr;
          const long kid = std::strtol(kids.c_str() + at, &endp, 10);
          if (endp == kids.c_str() + at) {
            break;
          }
          todo.push_back(static_cast<pid_t>(kid));
          at = static_cast<size_t>(endp - kids.c_str());
        }
      }
      ::closedir(t);
    }
    if (pid != sandbox_init && holds(pid)) {
      holder = pid;
    }
  }
  if (holder == 0 && !walked && !pidns.empty()) {
    // No children files (a kernel without CONFIG_PROC_CHILDREN, or init not readable): every
    // process whose pid namespace is the sandbox's.
    DIR* proc = ::opendir("/proc");
    for (dirent* e; proc != nullptr && holder == 0 && (e = ::readdir(proc)) != nullptr;) {
      if (Clock::now() >= deadline) {
        break;
      }
      char* endp = nullptr;
      const long pid = std::strtol(e->d_name, &endp, 10);
      if (pid <= 0 || *endp != '\0' || pid == sandbox_init ||
          read_link("/proc/" + std::string(e->d_name) + "/ns/pid") != pidns) {
        continue;  // not a process of the sandbox (or not ours to read)
      }
      if (holds(static_cast<pid_t>(pid))) {
        holder = static_cast<pid_t>(pid);
      }
    }
    if (proc != nullptr) {
      ::closedir(proc);
    }
  }
  for (pid_t p = holder; p > 0 && p != sandbox_init && chain.size() < DeciderQuestion::kMaxChain;
       p = parent_of(p)) {
    if (Clock::now() >= deadline && !chain.empty()) {
      break;
    }
    // The holder is init's descendant, and so is every process between them: the walk stops at
    // init, or where a parent can no longer be read.
    SandboxProcess sp;
    if (!read_sandbox_process(p, &sp)) {
      break;
    }
    chain.push_back(std::move(sp));
  }
  return chain;
}

}  // namespace cordon::netproxy
