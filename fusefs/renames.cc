// Rename detection by (size, hash) buckets.
#include "fusefs/renames.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <unordered_map>

#include "fusefs/safe_io.h"

namespace cordon::fusefs {
namespace {

// Files up to kKeepFile bytes are kept in memory when read for their hash, within kKeepTotal in
// all: a candidate pair is then compared without reading either file again.
constexpr size_t kKeepFile = 64 << 10;
constexpr size_t kKeepTotal = 64 << 20;

struct Content {
  uint64_t hash = 0;
  bool kept = false;  // `bytes` is the whole file, read to its end
  std::string bytes;
};

// FNV-1a over the whole file: only a bucket key, every match is confirmed byte for byte, so a
// collision costs one comparison and never a wrong rename. `*budget`: what may still be kept.
bool read_content(int fd, size_t* budget, Content* out) {
  uint64_t h = 1469598103934665603ull;
  bool keep = true;
  std::string bytes;
  char buf[65536];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n < 0) {
      return false;
    }
    if (n == 0) {
      break;
    }
    for (ssize_t i = 0; i < n; ++i) {
      h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
    }
    size_t total = bytes.size() + static_cast<size_t>(n);
    if (keep && (total > kKeepFile || total > *budget)) {
      keep = false;
      std::string().swap(bytes);
    }
    if (keep) {
      bytes.append(buf, static_cast<size_t>(n));
    }
    off += n;
  }
  if (keep) {
    *budget -= bytes.size();
  }
  *out = {h, keep, std::move(bytes)};
  return true;
}

bool same_bytes(int a, int b) {
  char ba[65536], bb[65536];
  for (off_t off = 0;;) {
    ssize_t na = ::pread(a, ba, sizeof ba, off);
    ssize_t nb = ::pread(b, bb, sizeof bb, off);
    if (na != nb || na < 0) {
      return false;
    }
    if (na == 0) {
      return true;
    }
    if (std::memcmp(ba, bb, static_cast<size_t>(na)) != 0) {
      return false;
    }
    off += na;
  }
}

UniqueFd open_side(int root, const std::string& rel) {
  return UniqueFd(open_beneath(root, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
}

// Empty files are not paired: any two would "match", and the pairing would mean nothing.
bool regular_file(const Change& c) { return c.type == 'f'; }

}  // namespace

std::vector<DiffEntry> pair_renames(const std::vector<Change>& changes, int lower_fd,
                                    int upper_fd) {
  // Deleted regular files by size; only sizes an added file also has are worth hashing.
  std::unordered_map<uint64_t, std::vector<size_t>> deleted_by_size;
  std::unordered_map<uint64_t, size_t> added_sizes;
  for (size_t i = 0; i < changes.size(); ++i) {
    const Change& c = changes[i];
    if (c.kind == ChangeKind::Added && regular_file(c) && c.size > 0) {
      added_sizes[c.size]++;
    }
  }
  for (size_t i = 0; i < changes.size(); ++i) {
    const Change& c = changes[i];
    if (c.kind == ChangeKind::Deleted && regular_file(c) && added_sizes.count(c.old_size) != 0) {
      deleted_by_size[c.old_size].push_back(i);
    }
  }
  // (size, hash) -> deleted candidates, hashed lazily per size bucket, in path order.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<size_t>> buckets;
  std::unordered_map<uint64_t, bool> hashed;
  std::vector<Content> deleted_content(changes.size());
  size_t budget = kKeepTotal;
  auto bucket_for = [&](uint64_t size) {
    if (hashed[size]) {
      return;
    }
    hashed[size] = true;
    for (size_t j : deleted_by_size[size]) {
      UniqueFd f = open_side(lower_fd, changes[j].path);
      if (f && read_content(f.get(), &budget, &deleted_content[j])) {
        buckets[{size, deleted_content[j].hash}].push_back(j);
      }
    }
  };
  std::map<std::pair<uint64_t, uint64_t>, size_t> cursor;
  std::vector<bool> used(changes.size(), false);
  std::vector<std::string> from(changes.size());
  for (size_t i = 0; i < changes.size(); ++i) {
    const Change& add = changes[i];
    if (add.kind != ChangeKind::Added || !regular_file(add) ||
        deleted_by_size.count(add.size) == 0) {
      continue;
    }
    bucket_for(add.size);
    UniqueFd nf = open_side(upper_fd, add.path);
    Content added;
    size_t add_budget = kKeepFile;  // kept only while it is compared
    if (!nf || !read_content(nf.get(), &add_budget, &added)) {
      continue;
    }
    auto it = buckets.find({add.size, added.hash});
    if (it == buckets.end()) {
      continue;
    }
    // Taken candidates sit at the front of their bucket: skip them once, not once per file.
    size_t& first = cursor[it->first];
    while (first < it->second.size() && used[it->second[first]]) {
      ++first;
    }
    for (size_t k = first; k < it->second.size(); ++k) {
      size_t j = it->second[k];
      if (used[j]) {
        continue;
      }
      Content& old = deleted_content[j];
      bool same = false;
      if (old.kept && added.kept) {
        same = old.bytes == added.bytes;
      } else {
        UniqueFd of = open_side(lower_fd, changes[j].path);
        same = of && same_bytes(of.get(), nf.get());
      }
      if (same) {
        used[j] = true;
        from[i] = changes[j].path;
        budget += old.bytes.size();
        std::string().swap(old.bytes);
        break;
      }
    }
  }
  std::vector<DiffEntry> out;
  out.reserve(changes.size());
  for (size_t i = 0; i < changes.size(); ++i) {
    if (!used[i]) {
      out.push_back({changes[i], std::move(from[i])});
    }
  }
  return out;
}

}  // namespace cordon::fusefs
