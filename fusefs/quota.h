// Byte and inode accounting of the upper layer, exact with concurrent writers: callers reserve
// before they grow anything and release what they free; a reservation past the limit fails.
#pragma once

#include <atomic>
#include <cstdint>

namespace cordon::fusefs {

struct Usage {
  uint64_t bytes = 0;   // sum of st_size of the upper layer's regular files (each inode once)
  uint64_t inodes = 0;  // upper objects the user made (whiteouts and internal records excluded)
};

class Quota {
 public:
  // limits of 0 mean unlimited.
  Quota(uint64_t byte_limit, uint64_t inode_limit, Usage start)
      : byte_limit_(byte_limit),
        inode_limit_(inode_limit),
        bytes_(start.bytes),
        inodes_(start.inodes) {}

  // Reserves up to `want` bytes; returns how many were granted (less when near the limit, so a
  // write can be short the way a full disk makes it short). 0 granted of a nonzero want = EDQUOT.
  uint64_t reserve_bytes_upto(uint64_t want);
  // All or nothing.
  bool reserve_bytes(uint64_t n);
  void release_bytes(uint64_t n);
  bool reserve_inode();
  void release_inode();

  // What an op reserved for an object it is about to make: handed back on destruction unless
  // committed, so every failure path between the reserve and the object's existence releases it.
  class Reservation {
   public:
    explicit Reservation(Quota& quota) : quota_(&quota) {}
    Reservation(Reservation&& other) noexcept
        : quota_(other.quota_), bytes_(other.bytes_), inodes_(other.inodes_) {
      other.commit();
    }
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { cancel(); }

    // Each is all or nothing; false leaves what was already held in place.
    bool inode();
    bool bytes(uint64_t n);
    // The object exists: what is held stays charged (its release is the object's removal).
    void commit() {
      bytes_ = 0;
      inodes_ = 0;
    }
    // Hands back at once what is held (as the destructor will).
    void cancel();

   private:
    Quota* quota_;
    uint64_t bytes_ = 0;
    uint64_t inodes_ = 0;
  };

  Usage usage() const { return {bytes_.load(), inodes_.load()}; }
  uint64_t byte_limit() const { return byte_limit_; }
  uint64_t inode_limit() const { return inode_limit_; }
  // After a rollback the upper layer is a different tree: start over from a fresh scan.
  void reset(Usage u) {
    bytes_ = u.bytes;
    inodes_ = u.inodes;
  }

 private:
  const uint64_t byte_limit_;
  const uint64_t inode_limit_;
  std::atomic<uint64_t> bytes_;
  std::atomic<uint64_t> inodes_;
};

// Walks an upper layer (dirfd) and sums what Quota counts. Never follows symlinks.
Usage scan_usage(int upper_dirfd);

}  // namespace cordon::fusefs
