// The commit journal: what a commit is about to do to the real workspace, written to the session
// directory before it does it, so that a commit killed at any point (kill -9, power loss) is
// completed or undone by the next `cordon commit` or `cordon discard`.
//
// Text, one record per line, paths percent-encoded (a name may hold any byte but '/' and NUL):
//   cordon-commit-journal 1
//   stage DIR                    a staging directory will be made in DIR ("." = workspace root)
//   put STAGE NAME PATH NEW_INO  the staged object STAGE/NAME is renamed to PATH (nothing there)
//   swap STAGE NAME PATH NEW_INO OLD_INO OLD_SIZE OLD_MTIME   exchanged with the workspace's
//                                object at PATH (validated as that inode, size and mtime in ns)
//   remove STAGE NAME PATH OLD_INO OLD_SIZE OLD_MTIME         PATH is moved to STAGE/NAME
//   chmod PATH INO OLD_MODE NEW_MODE       a directory's mode changes in place (octal)
//   drop PATH                    an applied change whose upper-layer entry goes at the end
//   clear-upper                  everything was applied: the whole upper layer goes at the end
//   ops-end                      every record above is complete; the renames may start
//   done                         every rename happened: the commit point
//   merged                       opaque upper directories were turned into merged ones
// Undo needs no record of progress: each op checks the inode numbers to see whether it ran.
//
// A second file, commit.validated, keeps "PATH INO SIZE MTIME" for every workspace object an
// undone commit moved back into place: the move changed its ctime, and these records tell the
// next commit it is still the object the session saw (what cordon-fs's origin records do for
// files it copied up).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::fusefs {

enum class OpKind { Put, Swap, Remove, Chmod };

struct JournalOp {
  OpKind kind = OpKind::Put;
  std::string path;       // workspace-relative
  size_t stage = 0;       // index into Journal::stages (Put, Swap, Remove)
  std::string name;       // the entry in that staging directory
  uint64_t new_ino = 0;   // Put, Swap: the staged object
  uint64_t old_ino = 0;   // Swap, Remove: the workspace's object; Chmod: the directory
  uint64_t old_size = 0;  // Swap, Remove: the workspace's object as validated
  int64_t old_mtime_ns = 0;
  uint32_t old_mode = 0, new_mode = 0;  // Chmod
  bool operator==(const JournalOp&) const = default;
};

struct Journal {
  std::vector<std::string> stages;  // directories holding a staging directory ("" = the root)
  std::vector<JournalOp> ops;
  std::vector<std::string> drop;
  bool clear_upper = false;
  bool ops_complete = false;
  bool done = false;
  bool merged = false;
  bool operator==(const Journal&) const = default;
};

// The journal's lines for `j` in the order the commit writes them (ops through "ops-end"; the
// "stage" lines and the markers are appended one by one).
std::string journal_stage_line(const std::string& dir);
std::string journal_ops_text(const Journal& j);
inline constexpr std::string_view kJournalHeader = "cordon-commit-journal 1\n";
inline constexpr std::string_view kJournalDone = "done\n";
inline constexpr std::string_view kJournalMerged = "merged\n";

// Parses a journal. A torn last line (no newline: the writer died in the middle of it) is
// ignored; anything else that does not parse is an error naming the line.
Result<Journal> parse_journal(std::string_view text);

// Appends `text` to the journal fd and makes it durable (fdatasync) before returning.
Status append_journal(int fd, std::string_view text);

// The record of one validated object (a commit.validated line without its newline), and the
// records of a commit.validated file by path ("INO SIZE MTIME", as cordon-fs's origin records).
std::string validated_line(const std::string& path, uint64_t ino, uint64_t size, int64_t mtime_ns);
Result<std::map<std::string, std::string>> parse_validated(std::string_view text);

// Percent-encoding of every byte outside [A-Za-z0-9._/+-] (and of '%'), and back.
std::string journal_encode(std::string_view raw);
bool journal_decode(std::string_view enc, std::string* raw);

}  // namespace cordon::fusefs
