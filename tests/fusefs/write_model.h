// The model of a heavy write workload cut short by a kill -9 (of cordon-fs, of cordon or of the
// program): what each file may hold afterwards. Shared by tests/fusefs/crash_test.cc (kills the
// daemon) and tests/launcher/cow_crash_test.cc (kills cordon, or the program kills itself).
// Files have a logical id and one of two names, f<id> or g<id>; their bytes come from pattern().
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace cordon::testing::write_model {

// One file of the workload: its logical id, the name it has now and its bytes.
struct FileState {
  std::string name;
  std::string data;
  bool operator==(const FileState&) const = default;
};

enum class OpKind { Replace, Overwrite, Append, Rename };

// The op the writer had started but not seen complete when the kill came.
struct Pending {
  size_t id;
  OpKind kind;
  FileState after;
};

inline std::string pattern(size_t id, int version, size_t size) {
  std::string tag = "<" + std::to_string(id) + ":" + std::to_string(version) + ">";
  std::string out;
  out.reserve(size);
  while (out.size() < size) {
    out += tag;
  }
  out.resize(size);
  return out;
}

// What an append of version `version` adds to file `id`: `len` filler bytes between a marker and
// a newline.
inline std::string append_record(size_t id, int version, size_t len) {
  return "+" + std::to_string(version) + std::string(len, static_cast<char>('a' + id % 26)) + "\n";
}

inline std::string other_name(const std::string& name) {
  return (name[0] == 'f' ? "g" : "f") + name.substr(1);
}

// What a file may look like after a kill: its last completed state, or for the op in flight,
// anything that op can leave when cut short. A write(2) the daemon was in the middle of may be
// cut short by the kill (the host kernel stops a write on a fatal signal), so an in-place
// overwrite may leave new bytes followed by old ones and an append a prefix of its record —
// never anything else, and never a half-built copy-up or a half-done rename or replace.
inline bool allowed(const FileState& seen, const FileState& before,
                    const std::optional<Pending>& p) {
  if (seen == before) {
    return true;
  }
  if (!p) {
    return false;
  }
  const FileState& after = p->after;
  if (seen == after) {
    return true;
  }
  switch (p->kind) {
    case OpKind::Overwrite: {
      if (seen.name != before.name || seen.data.size() != before.data.size()) {
        return false;
      }
      size_t k = 0;
      while (k < seen.data.size() && seen.data[k] == after.data[k]) {
        k++;
      }
      return seen.data.compare(k, std::string::npos, before.data, k, std::string::npos) == 0;
    }
    case OpKind::Append:
      return seen.name == before.name && seen.data.size() >= before.data.size() &&
             seen.data.size() <= after.data.size() &&
             after.data.compare(0, seen.data.size(), seen.data) == 0;
    default:
      return false;  // replace and rename are all or nothing
  }
}

}  // namespace cordon::testing::write_model
