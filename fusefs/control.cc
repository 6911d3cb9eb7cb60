// The control socket of a running cordon-fs.
#include "fusefs/control.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "fusefs/kernel/kernel_init.h"
#include "fusefs/kernel/uring.h"

namespace cordon::fusefs {

bool valid_snapshot_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') {
    return false;
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

Result<std::unique_ptr<ControlServer>> ControlServer::start(const std::string& socket_path,
                                                            CowFs* fs, std::string snapshots_dir) {
  std::unique_ptr<ControlServer> s(new ControlServer());
  s->path_ = socket_path;
  s->snapshots_ = std::move(snapshots_dir);
  s->fs_ = fs;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return make_error("control socket path too long (" + socket_path + ")",
                      "use a path under 108 bytes");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  s->listen_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s->listen_) {
    return sys_error("socket(AF_UNIX)");
  }
  struct stat st;
  if (::lstat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    ::unlink(socket_path.c_str());  // a stale socket of a previous, dead daemon
  }
  if (::bind(s->listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return sys_error("bind(\"" + socket_path + "\")", "is another cordon-fs using this socket?");
  }
  ::chmod(socket_path.c_str(), 0600);
  if (::listen(s->listen_.get(), 8) != 0) {
    return sys_error("listen(\"" + socket_path + "\")");
  }
  s->stop_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!s->stop_) {
    return sys_error("eventfd");
  }
  ControlServer* raw = s.get();
  s->thread_ = std::thread([raw] { raw->serve(); });
  return s;
}

ControlServer::~ControlServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof(one));
    thread_.join();
  }
  if (!path_.empty()) {
    ::unlink(path_.c_str());
  }
}

std::string ControlServer::handle(CowFs* fs, const std::string& snapshots_dir,
                                  const std::string& line) {
  nlohmann::json reply;
  try {
    nlohmann::json req = nlohmann::json::parse(line);
    std::string op = req.value("op", "");
    std::string name = req.value("name", "");
    if (op == "status") {
      Usage u = fs->usage();
      CowFs::IoStats io = fs->io_stats();
      reply = {{"ok", true},
               {"bytes", u.bytes},
               {"inodes", u.inodes},
               {"passthrough", io.passthrough},
               {"reads", io.reads},
               {"writes", io.writes},
               {"passthrough_opens", io.passthrough_opens}};
      // Which transport serves the mount (decided at INIT) and how many requests each carried.
      UringStats ur = uring_stats();
      reply["transport"] = io_uring_accepted() && ur.registered ? "io_uring" : "dev_fuse";
      reply["ring_requests"] = ur.ring_requests;
      reply["dev_requests"] = dev_requests_read();
      nlohmann::json by_op = nlohmann::json::object();
      for (const auto& [name, n] : requests_by_opcode()) {
        by_op[name] = n;
      }
      reply["requests"] = std::move(by_op);
    } else if (op == "snapshot" || op == "rollback") {
      if (!(op == "rollback" && name.empty()) && !valid_snapshot_name(name)) {
        reply = {{"ok", false},
                 {"error", "bad snapshot name \"" + name +
                               "\": use 1-64 of A-Z a-z 0-9 . _ -, not starting with '.'"}};
      } else {
        ::mkdir(snapshots_dir.c_str(), 0700);
        std::string path = name.empty() ? "" : snapshots_dir + "/" + name;
        Status st = op == "snapshot" ? fs->snapshot_to(path) : fs->rollback_to(path);
        if (st.ok()) {
          reply = {{"ok", true}};
          if (!path.empty()) {
            reply["path"] = path;
          }
        } else {
          reply = {{"ok", false}, {"error", st.error().to_string()}};
        }
      }
    } else {
      reply = {{"ok", false}, {"error", "unknown op \"" + op + "\" (snapshot, rollback, status)"}};
    }
  } catch (const std::exception& e) {
    reply = {{"ok", false}, {"error", std::string("bad request: ") + e.what()}};
  }
  return reply.dump() + "\n";
}

void ControlServer::serve() {
  try {
    for (;;) {
      pollfd fds[2] = {{listen_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) {
          continue;
        }
        return;
      }
      if (fds[1].revents) {
        return;
      }
      UniqueFd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) {
        continue;
      }
      // One client at a time; each line bounded (64 KiB) and each read given 10 s.
      std::string buf;
      char chunk[4096];
      for (;;) {
        pollfd p = {c.get(), POLLIN, 0};
        if (::poll(&p, 1, 10000) <= 0) {
          break;
        }
        ssize_t n = ::read(c.get(), chunk, sizeof(chunk));
        if (n <= 0) {
          break;
        }
        buf.append(chunk, static_cast<size_t>(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          std::string out = handle(fs_, snapshots_, buf.substr(0, nl));
          buf.erase(0, nl + 1);
          if (::send(c.get(), out.data(), out.size(), MSG_NOSIGNAL) < 0) {
            break;
          }
        }
        if (buf.size() > 65536) {
          break;
        }
      }
    }
  } catch (...) {
    // Exceptions never leave a thread entry; a dead control thread only loses the socket.
  }
}

}  // namespace cordon::fusefs
