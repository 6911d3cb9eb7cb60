// `cordon log ID --verify`: checks events.jsonl's hash chain, and its end against summary.json.
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "launcher/diagnostics.h"
#include "launcher/session/session.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "record/chain.h"

namespace cordon::launcher {

namespace {

// summary.json's record.chain, when the session ended and wrote one.
struct RecordedEnd {
  uint64_t lines = 0;
  std::string head;
};

std::optional<RecordedEnd> recorded_end(int dir_fd) {
  auto text = store::read_file(dir_fd, "summary.json", 1 << 20);
  if (!text.ok()) {
    return std::nullopt;
  }
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("record") || !j["record"].is_object()) {
    return std::nullopt;
  }
  auto c = j["record"].find("chain");
  if (c == j["record"].end() || !c->is_object() ||
      !c->value("lines", nlohmann::json()).is_number_unsigned() ||
      !c->value("head", nlohmann::json()).is_string()) {
    return std::nullopt;
  }
  return RecordedEnd{(*c)["lines"].get<uint64_t>(), (*c)["head"].get<std::string>()};
}

}  // namespace

int log_verify_command(const std::string& root, const std::string& id, std::ostream& out,
                       std::ostream& err) {
  auto resolved = resolve_session(root, id);
  if (!resolved.ok()) {
    say(err, resolved.error().to_string());
    return kVerifyCannotCheck;
  }
  auto root_fd = store::open_root(root);
  if (!root_fd.ok()) {
    say(err, root_fd.error().to_string());
    return kVerifyCannotCheck;
  }
  auto dir = store::open_session_dir(root_fd->get(), *resolved);
  if (!dir.ok()) {
    say(err, dir.error().to_string());
    return kVerifyCannotCheck;
  }
  auto fd = store::open_file(dir->get(), "events.jsonl");
  if (!fd.ok()) {
    say(err, "session " + *resolved + ": " + fd.error().to_string());
    return kVerifyCannotCheck;
  }
  record::ChainVerifier v;
  auto st = store::for_each_line(fd->get(), 0, [&](size_t n, std::string_view line, bool complete) {
    v.feed(n, line, complete);
  });
  if (!st.ok()) {
    say(err, "session " + *resolved + ": " + st.error().to_string());
    return kVerifyCannotCheck;
  }
  const record::ChainReport r = v.finish();
  const std::string who = "session " + *resolved + ": events.jsonl ";
  if (!r.ok()) {
    out << who << "line " << r.bad_line << " " << r.why << "\n";
    return kVerifyBroken;
  }
  std::optional<RecordedEnd> end = recorded_end(dir->get());
  if (end && (end->lines != r.chained || end->head != r.head)) {
    out << who << "ends at line " << r.lines << " with " << r.chained << " chained lines (head "
        << r.head << "), but summary.json records " << end->lines << " ending in " << end->head
        << ": "
        << (r.chained < end->lines ? "lines were removed from the end"
                                   : "the end of the record was changed")
        << "\n";
    return kVerifyBroken;
  }
  out << who << "verifies: " << r.chained << (r.chained == 1 ? " line" : " lines") << ", head "
      << r.head;
  if (end) {
    out << ", as summary.json records";
  } else {
    out << "; no summary.json (the session is running, or cordon stopped without one), so the "
           "end of the record cannot be checked";
  }
  out << "\n";
  if (r.torn_line != 0) {
    out << who << "line " << r.torn_line
        << " is torn: a writer stopped mid-line (killed, or the disk filled); the lines before "
           "it verify\n";
  }
  out.flush();
  return kVerifyOk;
}

int log_verify_stream_command(const std::string& id, std::istream& in, const std::string& name,
                              std::ostream& out, std::ostream& err) {
  constexpr size_t kMaxLine = 1 << 20;  // record lines are at most 64 KiB; output lines may be long
  constexpr size_t kNamed = 20;
  std::string head(record::kChainStart);
  uint64_t n = 0, chained = 0;
  std::vector<uint64_t> strays;
  std::string first_stray;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.size() > kMaxLine) {
      continue;
    }
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    const size_t brace = line.find('{');
    if (brace == std::string::npos) {
      continue;
    }
    std::string_view obj = std::string_view(line).substr(brace);
    auto j = nlohmann::json::parse(obj, nullptr, false);
    if (!j.is_object() || j.value("session", nlohmann::json()) != id) {
      continue;  // the program's own output, or another session's record
    }
    if (record::chain_follows(head, obj)) {
      head = std::string(*record::chain_field(obj));
      ++chained;
      continue;
    }
    if (strays.size() < kNamed) {
      strays.push_back(n);
    }
    if (first_stray.empty()) {
      first_stray = text::one_line(obj, 120);
    }
  }
  if (in.bad()) {
    say(err, name + ": could not be read");
    return kVerifyCannotCheck;
  }
  const std::string who = "session " + id + " in " + name + ": ";
  if (chained == 0 && strays.empty()) {
    say(err, who +
                 "no line of the session (check the id: the record's first line, session.start, "
                 "names it)");
    return kVerifyCannotCheck;
  }
  out << who << chained << (chained == 1 ? " line" : " lines") << " in the record's chain, head "
      << head << "\n";
  if (strays.empty()) {
    out.flush();
    return kVerifyOk;
  }
  out << who << "lines that claim the session but are not in its chain (not written by cordon, "
      << "or altered):";
  for (uint64_t s : strays) {
    out << " " << s;
  }
  out << (strays.size() == kNamed ? " ..." : "") << "\n"
      << who << "the first: " << first_stray << "\n";
  out.flush();
  return kVerifyBroken;
}

int log_verify_stream_command(const std::string& id, const std::string& path) {
  if (path == "-") {
    return log_verify_stream_command(id, std::cin, "standard input", std::cout, std::cerr);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    say(std::cerr, path + ": cannot open: " + std::strerror(errno));
    return kVerifyCannotCheck;
  }
  return log_verify_stream_command(id, in, path, std::cout, std::cerr);
}

int log_verify_command(const std::string& id) {
  return log_verify_command(sessions_root(), id, std::cout, std::cerr);
}

}  // namespace cordon::launcher
