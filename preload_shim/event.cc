// Event: one wire message assembled in a stack buffer (async-signal-safe, no allocation).
#include <string.h>
#include <unistd.h>

#include "preload_shim/shim.h"

namespace cordon::preload_shim {

Event::Event(wire::Kind kind, wire::Decision decision) {
  uint32_t magic = wire::kMagic;
  memset(buf_, 0, wire::kHeaderSize);
  memcpy(buf_ + wire::kOffMagic, &magic, 4);
  buf_[wire::kOffVersion] = wire::kVersion;
  buf_[wire::kOffKind] = kind;
  buf_[wire::kOffDecision] = decision;
  len_ = wire::kHeaderSize;
}

void Event::add(wire::Tag tag, const void* data, size_t len) {
  if (len_ + wire::kFieldHeaderSize > sizeof buf_) {
    return;
  }
  size_t room = sizeof buf_ - len_ - wire::kFieldHeaderSize;
  if (len > room) {
    len = room;  // a field that does not fit is cut, never split across messages
  }
  uint16_t l = static_cast<uint16_t>(len);
  buf_[len_] = tag;
  buf_[len_ + 1] = 0;
  memcpy(buf_ + len_ + 2, &l, 2);
  memcpy(buf_ + len_ + wire::kFieldHeaderSize, data, len);
  len_ += wire::kFieldHeaderSize + len;
}

void Event::add_str(wire::Tag tag, const char* s, size_t max_len) {
  if (s != nullptr) {
    add(tag, s, strnlen(s, max_len));
  }
}

void Event::add_u32(wire::Tag tag, uint32_t v) { add(tag, &v, sizeof v); }

void Event::add_u64(wire::Tag tag, uint64_t v) { add(tag, &v, sizeof v); }

void Event::add_sockaddr(wire::Tag tag, const sockaddr* sa, socklen_t len) {
  if (sa != nullptr && len > 0) {
    add(tag, sa, len > sizeof(sockaddr_storage) ? sizeof(sockaddr_storage) : len);
  }
}

void Event::add_identity() {
  if (len_ + g_config.identity_len <= sizeof buf_) {
    memcpy(buf_ + len_, g_config.identity, g_config.identity_len);
    len_ += g_config.identity_len;
  }
}

void Event::add_argv(char* const argv[], wire::Tag arg_tag, wire::Tag truncated_tag) {
  if (argv == nullptr) {
    return;
  }
  size_t budget = wire::kMaxArgvBytes;
  uint32_t i = 0;
  for (; argv[i] != nullptr; ++i) {
    if (i == wire::kMaxArgs || budget == 0) {
      break;
    }
    size_t len = strnlen(argv[i], budget);
    add(arg_tag, argv[i], len);
    budget -= len;
  }
  if (argv[i] != nullptr) {
    uint32_t argc = i;
    while (argv[argc] != nullptr && argc < 1000000) {
      ++argc;
    }
    add_u32(truncated_tag, argc);
  }
}

void stamp_sender(uint8_t* msg) {
  uint32_t pid = static_cast<uint32_t>(getpid());
  uint32_t ppid = static_cast<uint32_t>(getppid());
  memcpy(msg + wire::kOffPid, &pid, 4);
  memcpy(msg + wire::kOffPpid, &ppid, 4);
}

void Event::send(int attach_fd) {
  if (!g_config.have_socket) {
    return;
  }
  channel_send(buf_, len_, attach_fd);  // stamps pid/ppid once it has a channel to send on
}

bool Event::send_on(int fd) {
  stamp_sender(buf_);
  return channel_send_raw(fd, buf_, len_);
}

}  // namespace cordon::preload_shim
