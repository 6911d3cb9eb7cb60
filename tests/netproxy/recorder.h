// A loopback HTTP/1.1 server for the tests that ask "what reached the server, and did anything
// connect at all": it counts the connections it accepts and keeps every byte each one sent, as
// received (no parsing that could tidy a request up), and answers each request "200 ok" with
// Connection: close. It listens on 127.0.0.1 only; its thread is bounded in time.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cordon::testing {

class Recorder {
 public:
  Recorder() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(fd_, 16) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Recorder() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
    if (fd_ >= 0) {
      close(fd_);
    }
  }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  int port() const { return port_; }
  int accepted() const { return accepted_; }
  // The bytes of every connection so far, in the order they were accepted.
  std::vector<std::string> received() const {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  std::string all_received() const {
    std::string out;
    for (const auto& r : received()) {
      out += r;
    }
    return out;
  }

 private:
  // Whether `data` holds a whole request: a head, then a Content-Length body or a chunked body
  // through its last chunk and trailer section.
  static bool complete(const std::string& data) {
    const size_t head_end = data.find("\r\n\r\n");
    if (head_end == std::string::npos) {
      return false;
    }
    std::string head = data.substr(0, head_end + 4);
    for (char& c : head) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    const std::string body = data.substr(head_end + 4);
    if (head.find("transfer-encoding: chunked") != std::string::npos) {
      // A last chunk ("0" at a line start) followed by the blank line that ends the trailers.
      const size_t last = body.rfind("0\r\n");
      return last != std::string::npos && (last == 0 || body[last - 1] == '\n') &&
             body.size() >= 2 && body.ends_with("\r\n\r\n") &&
             body.find("\r\n\r\n", last) != std::string::npos;
    }
    const size_t cl = head.find("content-length:");
    if (cl == std::string::npos) {
      return true;
    }
    return body.size() >= std::stoul(head.substr(cl + 15));
  }

  void serve() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!stop_ && std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) != 1) {
        continue;
      }
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        continue;
      }
      ++accepted_;
      size_t slot;
      {
        std::lock_guard<std::mutex> lock(mu_);
        received_.emplace_back();
        slot = received_.size() - 1;
      }
      std::string data;
      const auto conn_end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!stop_ && !complete(data) && std::chrono::steady_clock::now() < conn_end) {
        pollfd q{c, POLLIN, 0};
        if (poll(&q, 1, 50) != 1) {
          continue;
        }
        char buf[16384];
        const ssize_t n = recv(c, buf, sizeof buf, 0);
        if (n <= 0) {
          break;
        }
        data.append(buf, static_cast<size_t>(n));
        std::lock_guard<std::mutex> lock(mu_);
        received_[slot] = data;
      }
      if (complete(data)) {
        static constexpr char kOk[] =
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
        (void)!send(c, kOk, sizeof kOk - 1, MSG_NOSIGNAL);
      }
      close(c);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  mutable std::mutex mu_;
  std::vector<std::string> received_;
  std::thread thread_;
};

}  // namespace cordon::testing
