// `cordon report`: a session's record as one self-contained HTML page.
#pragma once

#include <iosfwd>
#include <string>

namespace cordon::launcher {

struct ReportOptions {
  std::string id;      // a session id, a unique prefix of one, or "last"
  std::string output;  // "" = cordon-report-ID.html in the current directory; "-" = stdout
  bool force = false;  // replace an existing output file
};

// Exit 0 written; 1 refused (the output file exists and no --force); 125 failed (bad id,
// unreadable record, cannot write).
int report_command(const ReportOptions& opts);
int report_command(const std::string& root, const ReportOptions& opts, std::ostream& out);

}  // namespace cordon::launcher
