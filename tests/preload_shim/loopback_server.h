// A loopback TCP server for shim tests: accepts up to N connections within a deadline, records
// the peer port and the first line each client sends, optionally answers with a fixed response.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "base/unique_fd.h"

namespace cordon::testing {

class LoopbackServer {
 public:
  // `reply`: sent after the request's first line (or "\r\n\r\n" for HTTP) arrives.
  explicit LoopbackServer(int max_connections, std::string reply = {}, bool http = false)
      : reply_(std::move(reply)), http_(http) {
    fd_.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_.get(), 128) != 0) {
      return;
    }
    socklen_t len = sizeof a;
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, max_connections] { serve(max_connections); });
  }
  ~LoopbackServer() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  int port() const { return port_; }
  // peer port -> first line received
  std::map<int, std::string> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  void wait_done() {
    if (thread_.joinable()) {
      thread_.join();
    }
  }

 private:
  void serve(int max_connections) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int handled = 0;
    while (handled < max_connections && !stop_ && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) {
        continue;
      }
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      UniqueFd c(accept4(fd_.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC));
      if (!c) {
        continue;
      }
      ++handled;
      std::string got;
      char buf[4096];
      auto conn_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < conn_deadline) {
        pollfd q{c.get(), POLLIN, 0};
        if (poll(&q, 1, 100) <= 0) {
          continue;
        }
        ssize_t n = read(c.get(), buf, sizeof buf);
        if (n <= 0) {
          break;
        }
        got.append(buf, static_cast<size_t>(n));
        if ((http_ && got.find("\r\n\r\n") != std::string::npos) ||
            (!http_ && got.find('\n') != std::string::npos)) {
          break;
        }
      }
      {
        // Recorded before replying: a client that exits after reading the reply finds it here.
        std::lock_guard<std::mutex> lock(mu_);
        seen_[ntohs(peer.sin_port)] = got.substr(0, got.find('\n'));
      }
      if (!reply_.empty()) {
        ssize_t ignored = write(c.get(), reply_.data(), reply_.size());
        (void)ignored;
      }
    }
  }

  UniqueFd fd_;
  int port_ = 0;
  std::string reply_;
  bool http_;
  std::thread thread_;
  std::mutex mu_;
  std::map<int, std::string> seen_;
  std::atomic<bool> stop_{false};
};

}  // namespace cordon::testing
