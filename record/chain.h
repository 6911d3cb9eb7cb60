// The record's hash chain: every events.jsonl line ends in "chain", the hex SHA-256 of the previous
// line's chain value followed by the line itself without its chain field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::record {

// The schema version every line carries as "v".
inline constexpr int kSchemaVersion = 1;
// The chain value before the first line: 64 zeros.
inline constexpr std::string_view kChainStart =
    "0000000000000000000000000000000000000000000000000000000000000000";
inline constexpr size_t kChainHexLen = 64;
// What seal() adds to an object: "v":1, and ,"chain":"<64 hex>" and the newline (less one
// comma for an empty object).
inline constexpr size_t kSealOverhead = 6 + 10 + kChainHexLen + 1 + 1;

// `object`: one serialised JSON object ("{...}", no newline). Returns the line as written:
// {"v":1,<fields>,<pad spaces>,"chain":"<hex>"}\n, where hex = SHA-256(prev + the same line
// without ,"chain":"<hex>" and without the newline). `pad` spaces of JSON whitespace go before the
// chain field, so they are covered by it.
std::string seal(std::string_view object, std::string_view prev, size_t pad = 0);

// The chain value a line (without its newline) ends in, if it ends in one.
std::optional<std::string_view> chain_field(std::string_view line);

// true when `line` (without its newline) ends in the chain value that follows `prev`.
bool chain_follows(std::string_view prev, std::string_view line);

// What a reader of the whole record concluded.
struct ChainReport {
  uint64_t lines = 0;             // lines read, the torn last one included
  uint64_t chained = 0;           // lines that verified
  std::string head{kChainStart};  // the chain value of the last line that verified
  uint64_t bad_line = 0;          // the first line that breaks the chain (1-based), 0: none
  std::string why;                // ... and why: "line N <why>"
  uint64_t torn_line = 0;         // a last line without its newline: a writer stopped mid-line
  bool ok() const { return bad_line == 0; }
};

// Checks the chain line by line, holding one line back to tell a moved line from an edited one.
class ChainVerifier {
 public:
  // Line `n` (1-based) without its newline; `complete`: it ended in one.
  void feed(uint64_t n, std::string_view line, bool complete);
  // The end of the file.
  ChainReport finish();

 private:
  bool follows(std::string_view prev, std::string_view line) const;
  void fail(uint64_t n, std::string why);

  ChainReport r_;
  bool stopped_ = false;
  std::optional<uint64_t> held_n_;  // the first line that did not follow, until the next is seen
  std::string held_;
};

}  // namespace cordon::record
