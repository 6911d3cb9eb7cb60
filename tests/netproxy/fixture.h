// Shared pieces of the netproxy integration tests: upstream servers on loopback, the proxy binary
// under test, the event log reader and small blocking socket clients with deadlines.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/netproxy/child.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace cordon::testing {

inline std::string proxy_binary() { return build_path("netproxy/cordon-netproxy"); }

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

inline std::vector<nlohmann::json> read_events(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) {
      out.push_back(nlohmann::json::parse(line));
    }
  }
  return out;
}

inline std::vector<nlohmann::json> events_of(const std::string& path, const std::string& kind,
                                             std::function<bool(const nlohmann::json&)> pred = {}) {
  std::vector<nlohmann::json> out;
  for (auto& e : read_events(path)) {
    if (e.value("kind", "") == kind && (!pred || pred(e))) {
      out.push_back(e);
    }
  }
  return out;
}

// The whole event log, for failure messages.
inline std::string dump_events(const std::string& path) {
  std::ifstream in(path);
  return "events.jsonl:\n" + std::string((std::istreambuf_iterator<char>(in)), {});
}

// Events are written when a connection closes, which can trail the client's view by a moment:
// poll (bounded) until `n` matching events are there.
inline std::vector<nlohmann::json> wait_events(
    const std::string& path, const std::string& kind, size_t n,
    std::function<bool(const nlohmann::json&)> pred = {}) {
  std::vector<nlohmann::json> got;
  for (int i = 0; i < 500; ++i) {
    got = events_of(path, kind, pred);
    if (got.size() >= n) {
      break;
    }
    usleep(20000);
  }
  return got;
}

// Upstream servers (tests/netproxy/upstreams.py) on 127.0.0.1.
class Upstreams {
 public:
  explicit Upstreams(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{"python3", source_path("tests/netproxy/upstreams.py")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = Child::start(argv);
    auto line = child_.read_line();
    if (!line.empty()) {
      ports_ = nlohmann::json::parse(line);
    }
  }
  bool ok() const { return ports_.is_object(); }
  int port(const std::string& name) const { return ports_.value(name, 0); }
  nlohmann::json stats() const;

 private:
  Child child_;
  nlohmann::json ports_;
};

// A throwaway CA (ca.pem) and a server certificate for api.test and other.test (srv.pem, srv.key)
// in `dir`, made with the openssl CLI; plus www/ with hello.txt and a bare git repo (repo.git)
// served by dumb HTTP. Returns false if a step failed.
inline bool make_test_files(const TempDir& d) {
  auto sh = [](const std::string& cmd) { return run_program({"sh", "-c", cmd}).exit_code() == 0; };
  std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  write_file(d / "san.ext", "subjectAltName=DNS:api.test,DNS:other.test\n");
  return sh("cd " + d.path() + " && openssl req -x509 " + ec +
            " -keyout ca.key -out ca.pem -days 2 -subj '/CN=cordon test CA' 2>/dev/null") &&
         sh("cd " + d.path() + " && openssl req " + ec +
            " -keyout srv.key -out srv.csr -subj '/CN=api.test' 2>/dev/null && "
            "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
            "-out srv.pem -days 2 -extfile san.ext 2>/dev/null") &&
         sh("cd " + d.path() +
            " && mkdir www && git init -q src && cd src && "
            "echo 'cordon test repo' > README && git add README && "
            "git -c user.name=t -c user.email=t@t commit -qm init && cd .. && "
            "git clone -q --bare src www/repo.git && cd www/repo.git && "
            "git update-server-info && printf 'hello through cordon\\n' > ../hello.txt");
}

// ---- blocking socket helpers, every call bounded ----

inline int tcp_connect(const std::string& ip, int port) {
  sockaddr_storage ss{};
  socklen_t len;
  int family;
  if (ip.find(':') != std::string::npos) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET6, ip.c_str(), &s6->sin6_addr);
    len = sizeof *s6;
    family = AF_INET6;
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, ip.c_str(), &s4->sin_addr);
    len = sizeof *s4;
    family = AF_INET;
  }
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until `want` bytes, EOF/error, or the deadline. Sets *eof when the peer closed.
inline std::string recv_n(int fd, size_t want, int timeout_ms = 10000, bool* eof = nullptr) {
  std::string out;
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (eof) *eof = false;
  while (out.size() < want) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    end - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[65536];
    ssize_t n = recv(fd, buf, std::min(sizeof buf, want - out.size()), 0);
    if (n <= 0) {
      if (eof) *eof = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

inline nlohmann::json Upstreams::stats() const {
  int fd = tcp_connect("127.0.0.1", port("stats"));
  if (fd < 0) return {};
  auto line = recv_n(fd, 4096, 5000);
  close(fd);
  return nlohmann::json::parse(line, nullptr, false);
}

// SOCKS5 CONNECT; returns the reply code (or -1 on a protocol failure). The socket stays open in
// *fd for relaying when the code is 0.
inline int socks5_connect(int proxy_port, uint8_t atyp, const std::string& addr, int port,
                          int* fd_out, uint8_t command = 1) {
  int fd = tcp_connect("127.0.0.1", proxy_port);
  if (fd < 0) return -1;
  *fd_out = fd;
  if (!send_all(fd, std::string("\x05\x01\x00", 3))) return -1;
  auto g = recv_n(fd, 2);
  if (g != std::string("\x05\x00", 2)) return -1;
  std::string req{'\x05', static_cast<char>(command), '\x00', static_cast<char>(atyp)};
  if (atyp == 3) {
    req.push_back(static_cast<char>(addr.size()));
    req += addr;
  } else if (atyp == 1) {
    in_addr a{};
    inet_pton(AF_INET, addr.c_str(), &a);
    req.append(reinterpret_cast<char*>(&a), 4);
  } else if (atyp == 4) {
    in6_addr a{};
    inet_pton(AF_INET6, addr.c_str(), &a);
    req.append(reinterpret_cast<char*>(&a), 16);
  } else {
    req += addr;  // raw bytes for unsupported types
  }
  req.push_back(static_cast<char>(port >> 8));
  req.push_back(static_cast<char>(port & 0xff));
  if (!send_all(fd, req)) return -1;
  auto head = recv_n(fd, 4);
  if (head.size() < 4 || head[0] != 5) return -1;
  size_t rest = head[3] == 4 ? 16 + 2 : 4 + 2;
  recv_n(fd, rest);
  return static_cast<uint8_t>(head[1]);
}

// The proxy under test with an explicit listener on 127.0.0.1:0 and its own events file.
class ProxyUnderTest {
 public:
  ProxyUnderTest(const TempDir& dir, const std::string& policy_json,
                 std::vector<std::string> extra = {}, std::vector<std::pair<int, int>> fds = {},
                 std::vector<std::string> prefix = {})
      : events_(dir / "events.jsonl"), policy_(dir / "policy.json") {
    write_file(policy_, policy_json);
    std::vector<std::string> argv = prefix;
    argv.insert(argv.end(),
                {proxy_binary(), "--policy", policy_, "--events", events_, "--session", "test"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = Child::start(argv, fds);
    if (std::find(extra.begin(), extra.end(), "--listen") != extra.end()) {
      auto line = child_.read_line();
      auto colon = line.rfind(':');
      if (colon != std::string::npos) {
        port_ = std::stoi(line.substr(colon + 1));
      }
    }
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& events() const { return events_; }
  Child& child() { return child_; }

 private:
  std::string events_, policy_;
  Child child_;
  int port_ = 0;
};

}  // namespace cordon::testing
