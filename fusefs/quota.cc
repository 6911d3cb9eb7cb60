// Byte and inode accounting of the upper layer.
#include "fusefs/quota.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {

uint64_t Quota::reserve_bytes_upto(uint64_t want) {
  uint64_t cur = bytes_.load();
  for (;;) {
    uint64_t grant = want;
    if (byte_limit_ != 0) {
      uint64_t room = cur >= byte_limit_ ? 0 : byte_limit_ - cur;
      grant = want < room ? want : room;
    }
    if (grant == 0) {
      return 0;
    }
    if (bytes_.compare_exchange_weak(cur, cur + grant)) {
      return grant;
    }
  }
}

bool Quota::reserve_bytes(uint64_t n) {
  if (n == 0) {
    return true;
  }
  uint64_t cur = bytes_.load();
  for (;;) {
    if (byte_limit_ != 0 && (cur > byte_limit_ || n > byte_limit_ - cur)) {
      return false;
    }
    if (bytes_.compare_exchange_weak(cur, cur + n)) {
      return true;
    }
  }
}

void Quota::release_bytes(uint64_t n) {
  uint64_t cur = bytes_.load();
  while (!bytes_.compare_exchange_weak(cur, cur >= n ? cur - n : 0)) {
  }
}

Quota::Reservation& Quota::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    cancel();
    quota_ = other.quota_;
    bytes_ = other.bytes_;
    inodes_ = other.inodes_;
    other.commit();
  }
  return *this;
}

bool Quota::Reservation::inode() {
  if (!quota_->reserve_inode()) {
    return false;
  }
  inodes_++;
  return true;
}

bool Quota::Reservation::bytes(uint64_t n) {
  if (!quota_->reserve_bytes(n)) {
    return false;
  }
  bytes_ += n;
  return true;
}

void Quota::Reservation::cancel() {
  for (; inodes_ > 0; inodes_--) {
    quota_->release_inode();
  }
  if (bytes_ != 0) {
    quota_->release_bytes(bytes_);
    bytes_ = 0;
  }
}

bool Quota::reserve_inode() {
  uint64_t cur = inodes_.load();
  for (;;) {
    if (inode_limit_ != 0 && cur >= inode_limit_) {
      return false;
    }
    if (inodes_.compare_exchange_weak(cur, cur + 1)) {
      return true;
    }
  }
}

void Quota::release_inode() {
  uint64_t cur = inodes_.load();
  while (!inodes_.compare_exchange_weak(cur, cur > 0 ? cur - 1 : 0)) {
  }
}

namespace {

void scan(int dirfd, Usage* u, std::set<std::pair<dev_t, ino_t>>* seen) {
  int err = 0;
  for (const auto& n : list_dir(dirfd, &err)) {
    if (is_reserved_name(n)) {
      continue;
    }
    struct stat st;
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;
    }
    if (!seen->insert({st.st_dev, st.st_ino}).second) {
      continue;  // another name of a hard link already counted
    }
    u->inodes++;
    if (S_ISREG(st.st_mode)) {
      u->bytes += static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(open_beneath(dirfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (sub) {
        scan(sub.get(), u, seen);
      }
    }
  }
}

}  // namespace

Usage scan_usage(int upper_dirfd) {
  Usage u;
  std::set<std::pair<dev_t, ino_t>> seen;
  scan(upper_dirfd, &u, &seen);
  return u;
}

}  // namespace cordon::fusefs
