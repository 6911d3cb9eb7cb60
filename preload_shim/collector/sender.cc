// Sender: a record's identity fields from the kernel, the message's own claims kept apart.
#include "preload_shim/collector/sender.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <algorithm>

#include "preload_shim/collector/decode.h"
#include "preload_shim/collector/sender_identity.h"
#include "preload_shim/wire.h"

namespace cordon::preload_shim {

namespace {

constexpr size_t kMaxTried = 64;
constexpr size_t kMaxPids = 1024;

// "1.2.3.4:80" of an inet socket's own (peer = false) or remote address, "" if it has none.
std::string socket_address(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
               : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (r != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) {
    return {};
  }
  return sockaddr_text(&ss, len);
}

// Moves ev[key] to claims[key] unless it equals `truth` (a null truth: the kernel could not tell).
void keep_claim(nlohmann::json& ev, nlohmann::json& claims, const char* key,
                const nlohmann::json& truth) {
  auto it = ev.find(key);
  if (it == ev.end()) {
    if (!truth.is_null()) {
      ev[key] = truth;
    }
    return;
  }
  if (*it != truth) {
    claims[key] = std::move(*it);
  }
  if (truth.is_null()) {
    ev.erase(key);
  } else {
    ev[key] = truth;
  }
}

}  // namespace

void Sender::hello(const nlohmann::json& ev, const ucred& cred, int passed) {
  if (auto it = ev.find("channel_fd");
      it != ev.end() && it->is_number_unsigned() && it->get<uint64_t>() < (1u << 30)) {
    channel_fd_ = static_cast<int>(it->get<uint64_t>());
  }
  if (passed >= 0 && !verified_) {
    channel_.reset(::fcntl(passed, F_DUPFD_CLOEXEC, 0));
  }
  for (const char* key : {"exe", "argv", "argc"}) {
    if (ev.contains(key)) {
      claimed_[key] = ev[key];
    }
  }
  verify(cred.pid);
}

void Sender::verify(pid_t host_pid) {
  if (verified_ || !channel_ || !tried_.emplace(host_pid, true).second) {
    return;
  }
  // Read first, check after: if the sender still holds the socket it passed, close-on-exec, once
  // the reads are done, it cannot have exec'd before them, so what was read is the image that
  // sent. (Any socket of its own would do for that proof; a genuine shim passes its end of the
  // connection.)
  std::string exe = read_exe(host_pid);
  // Its pids too, while it is there to read: a short-lived sender is often gone by the time its
  // next message is handled, and that message still needs them.
  (void)pids_of(host_pid);
  // The shim's own bounds, so an unchanged argv reads the same from both.
  auto argv = read_cmdline(host_pid, wire::kMaxArgs, wire::kMaxArgvBytes);
  const bool holds = !exe.empty() && holds_same_file(host_pid, channel_fd_, channel_.get());
  if (!holds) {
    if (tried_.size() >= kMaxTried) {
      channel_.reset();  // no more attempts on this connection
    }
    return;
  }
  image_ = {{"exe", exe}};
  if (argv) {
    image_["argv"] = argv->args;
    if (argv->truncated()) {
      image_["argc"] = argv->argc;
    }
  }
  verified_ = true;
  channel_.reset();
}

Sender::Pids Sender::pids_of(pid_t host_pid) {
  if (auto it = pids_.find(host_pid); it != pids_.end()) {
    return it->second;
  }
  Pids p;
  if (auto ids = read_status(host_pid)) {
    // The sender's own level: the sandbox below the collector, or the collector's level when they
    // share a pid namespace (--no-namespaces).
    size_t level = std::min(depth_, ids->nspid.size() - 1);
    p.pid = ids->nspid[level];
    if (ids->ppid > 0) {
      auto parent = read_status(static_cast<pid_t>(ids->ppid));
      // A parent outside the sandbox (cordon's own) has no pid there: 0, as getppid() says inside.
      p.ppid = parent && parent->nspid.size() > level ? parent->nspid[level] : 0;
    }
  }
  if (p.pid >= 0) {
    if (pids_.size() >= kMaxPids) {
      pids_.clear();
    }
    pids_.emplace(host_pid, p);
  }
  return p;
}

void Sender::apply(nlohmann::json& ev, const ucred& cred, int passed) {
  nlohmann::json claims = nlohmann::json::object();
  const Pids p = pids_of(cred.pid);
  keep_claim(ev, claims, "pid", p.pid >= 0 ? nlohmann::json(p.pid) : nlohmann::json());
  keep_claim(ev, claims, "ppid", p.ppid >= 0 ? nlohmann::json(p.ppid) : nlohmann::json());

  verify(cred.pid);
  for (const char* key : {"exe", "argv", "argc"}) {
    if (claimed_.contains(key) && !ev.contains(key)) {
      ev[key] = claimed_[key];  // the hello's claim, as if this message had made it
    }
    auto truth = verified_ && image_.contains(key) ? image_[key] : nlohmann::json();
    keep_claim(ev, claims, key, truth);
  }

  if (ev.value("kind", "") == "net.connect") {
    std::string local = passed >= 0 ? socket_address(passed, false) : std::string();
    std::string remote = passed >= 0 ? socket_address(passed, true) : std::string();
    keep_claim(ev, claims, "local", local.empty() ? nlohmann::json() : nlohmann::json(local));
    if (!remote.empty()) {
      keep_claim(ev, claims, "remote", remote);  // else: not connected yet, the claim stays
    }
  }
  if (!claims.empty()) {
    ev["claimed"] = std::move(claims);
  }
}

}  // namespace cordon::preload_shim
