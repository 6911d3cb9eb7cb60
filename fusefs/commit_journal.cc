// The commit journal's text form: writing, durable appends and parsing.
#include "fusefs/commit_journal.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>

namespace cordon::fusefs {
namespace {

bool plain_byte(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '/' || c == '+' || c == '-';
}

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find(' ', i);
    if (j == std::string_view::npos) {
      j = line.size();
    }
    out.push_back(line.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

template <typename T>
bool number(std::string_view s, T* out, int base = 10) {
  if (s.empty()) {
    return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string op_line(const JournalOp& op) {
  auto n = [](uint64_t v) { return std::to_string(v); };
  std::string path = journal_encode(op.path);
  std::string where = std::to_string(op.stage) + " " + journal_encode(op.name) + " " + path;
  std::string old = n(op.old_ino) + " " + n(op.old_size) + " " + std::to_string(op.old_mtime_ns);
  switch (op.kind) {
    case OpKind::Put:
      return "put " + where + " " + n(op.new_ino) + "\n";
    case OpKind::Swap:
      return "swap " + where + " " + n(op.new_ino) + " " + old + "\n";
    case OpKind::Remove:
      return "remove " + where + " " + old + "\n";
    case OpKind::Chmod: {
      char modes[32];
      std::snprintf(modes, sizeof modes, "%o %o", op.old_mode, op.new_mode);
      return "chmod " + path + " " + n(op.old_ino) + " " + modes + "\n";
    }
  }
  return "";
}

// One op line's fields after the keyword; false when they do not form a valid op.
bool parse_op(std::string_view kw, const std::vector<std::string_view>& f, size_t stages,
              JournalOp* op) {
  if (kw == "chmod") {
    op->kind = OpKind::Chmod;
    return f.size() == 5 && journal_decode(f[1], &op->path) && number(f[2], &op->old_ino) &&
           number(f[3], &op->old_mode, 8) && number(f[4], &op->new_mode, 8) &&
           op->old_mode <= 07777 && op->new_mode <= 07777;
  }
  size_t want = kw == "put" ? 5 : kw == "swap" ? 8 : kw == "remove" ? 7 : 0;
  if (want == 0 || f.size() != want || !number(f[1], &op->stage) || op->stage >= stages ||
      !journal_decode(f[2], &op->name) || !journal_decode(f[3], &op->path)) {
    return false;
  }
  if (kw == "put") {
    op->kind = OpKind::Put;
    return number(f[4], &op->new_ino);
  }
  size_t old = 4;
  op->kind = OpKind::Remove;
  if (kw == "swap") {
    op->kind = OpKind::Swap;
    if (!number(f[4], &op->new_ino)) {
      return false;
    }
    old = 5;
  }
  return number(f[old], &op->old_ino) && number(f[old + 1], &op->old_size) &&
         number(f[old + 2], &op->old_mtime_ns);
}

// A workspace-relative path a journal may name: no empty, "." or ".." component, not absolute.
bool relative_path(const std::string& p, bool root_ok) {
  if (p.empty() || p == ".") {
    return root_ok;
  }
  if (p.front() == '/' || p.back() == '/') {
    return false;
  }
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) {
      j = p.size();
    }
    std::string_view c(p.data() + i, j - i);
    if (c.empty() || c == "." || c == "..") {
      return false;
    }
    i = j + 1;
  }
  return true;
}

}  // namespace

std::string journal_encode(std::string_view raw) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(raw.size());
  for (unsigned char c : raw) {
    if (plain_byte(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out.empty() ? "." : out;
}

bool journal_decode(std::string_view enc, std::string* raw) {
  raw->clear();
  if (enc == ".") {
    return true;
  }
  for (size_t i = 0; i < enc.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(enc[i]);
    if (c == '%') {
      unsigned v = 0;
      if (i + 2 >= enc.size() || !number(enc.substr(i + 1, 2), &v, 16)) {
        return false;
      }
      raw->push_back(static_cast<char>(v));
      i += 2;
    } else if (plain_byte(c)) {
      raw->push_back(static_cast<char>(c));
    } else {
      return false;
    }
  }
  return !raw->empty() && raw->find('\0') == std::string::npos;
}

std::string journal_stage_line(const std::string& dir) {
  return "stage " + journal_encode(dir) + "\n";
}

std::string journal_ops_text(const Journal& j) {
  std::string out;
  for (const auto& op : j.ops) {
    out += op_line(op);
  }
  for (const auto& p : j.drop) {
    out += "drop " + journal_encode(p) + "\n";
  }
  if (j.clear_upper) {
    out += "clear-upper\n";
  }
  out += "ops-end\n";
  return out;
}

Result<Journal> parse_journal(std::string_view text) {
  if (!text.starts_with(kJournalHeader)) {
    return make_error("not a cordon commit journal (its first line is not \"" +
                      std::string(kJournalHeader.substr(0, kJournalHeader.size() - 1)) + "\")");
  }
  Journal j;
  size_t pos = kJournalHeader.size();
  size_t line_no = 1;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {
      break;  // torn by a crash in the middle of an append: it was never acted on
    }
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    auto bad = [&] {
      return make_error("commit journal line " + std::to_string(line_no) + " does not parse");
    };
    std::vector<std::string_view> f = fields_of(line);
    if (f.empty()) {
      return bad();
    }
    std::string_view kw = f[0];
    // Stages, then ops up to ops-end, then the markers: the order the commit writes them.
    if (kw == "stage") {
      std::string dir;
      if (j.ops_complete || !j.ops.empty() || f.size() != 2 || !journal_decode(f[1], &dir) ||
          !relative_path(dir == "." ? "" : dir, true)) {
        return bad();
      }
      j.stages.push_back(dir);
    } else if (kw == "put" || kw == "swap" || kw == "remove" || kw == "chmod") {
      JournalOp op;
      if (j.ops_complete || !parse_op(kw, f, j.stages.size(), &op) ||
          !relative_path(op.path, false) || op.name.find('/') != std::string::npos ||
          (op.kind != OpKind::Chmod && op.name.empty())) {
        return bad();
      }
      j.ops.push_back(std::move(op));
    } else if (kw == "drop") {
      std::string p;
      if (j.ops_complete || f.size() != 2 || !journal_decode(f[1], &p) ||
          !relative_path(p, false)) {
        return bad();
      }
      j.drop.push_back(std::move(p));
    } else if (kw == "clear-upper" && f.size() == 1 && !j.ops_complete) {
      j.clear_upper = true;
    } else if (kw == "ops-end" && f.size() == 1 && !j.ops_complete) {
      j.ops_complete = true;
    } else if (kw == "done" && f.size() == 1 && j.ops_complete && !j.done) {
      j.done = true;
    } else if (kw == "merged" && f.size() == 1 && j.done && !j.merged) {
      j.merged = true;
    } else {
      return bad();
    }
  }
  return j;
}

std::string validated_line(const std::string& path, uint64_t ino, uint64_t size, int64_t mtime_ns) {
  return journal_encode(path) + " " + std::to_string(ino) + " " + std::to_string(size) + " " +
         std::to_string(mtime_ns);
}

Result<std::map<std::string, std::string>> parse_validated(std::string_view text) {
  std::map<std::string, std::string> out;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {
      break;  // torn
    }
    std::vector<std::string_view> f = fields_of(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    std::string path;
    uint64_t ino = 0, size = 0;
    int64_t mtime = 0;
    if (f.size() != 4 || !journal_decode(f[0], &path) || !relative_path(path, false) ||
        !number(f[1], &ino) || !number(f[2], &size) || !number(f[3], &mtime)) {
      return make_error("commit.validated line " + std::to_string(line_no) + " does not parse");
    }
    out[path] = std::to_string(ino) + " " + std::to_string(size) + " " + std::to_string(mtime);
  }
  return out;
}

Status append_journal(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return sys_error("writing the commit journal");
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  if (::fdatasync(fd) != 0) {
    return sys_error("fdatasync of the commit journal");
  }
  return {};
}

}  // namespace cordon::fusefs
