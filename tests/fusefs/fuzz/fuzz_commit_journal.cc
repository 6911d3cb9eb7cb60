// libFuzzer target: the commit journal and commit.validated parsers on arbitrary bytes. A journal
// that parses must write back to text that parses to the same journal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fusefs/commit_journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)cordon::fusefs::parse_validated(text);
  auto j = cordon::fusefs::parse_journal(text);
  if (!j.ok()) {
    return 0;
  }
  std::string again(cordon::fusefs::kJournalHeader);
  for (const auto& s : j->stages) {
    again += cordon::fusefs::journal_stage_line(s);
  }
  if (j->ops_complete) {
    again += cordon::fusefs::journal_ops_text(*j);
  }
  if (j->done) {
    again += cordon::fusefs::kJournalDone;
  }
  if (j->merged) {
    again += cordon::fusefs::kJournalMerged;
  }
  auto back = cordon::fusefs::parse_journal(again);
  if (j->ops_complete && (!back.ok() || !(*back == *j))) {
    __builtin_trap();  // what was parsed must write back to the same journal
  }
  return 0;
}
