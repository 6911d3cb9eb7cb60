// Lines out of a file read as it grows: chunks in, whole lines out, the unfinished end kept for
// the next chunk, with a bound on how much of one line is held.
#pragma once

#include <string>
#include <string_view>

namespace cordon::launcher {

class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line) : max_(max_line) {}

  // Calls on_line(line, complete) for each line `chunk` finishes, without its newline.
  // `complete` is false for a line longer than max_line: only its start was kept.
  template <typename F>
  void feed(std::string_view chunk, F&& on_line) {
    while (!chunk.empty()) {
      size_t nl = chunk.find('\n');
      std::string_view piece = chunk.substr(0, nl);
      if (partial_.size() + piece.size() > max_) {
        overlong_ = true;
        piece = piece.substr(0, max_ - partial_.size());
      }
      partial_.append(piece);
      if (nl == std::string_view::npos) {
        return;
      }
      chunk.remove_prefix(nl + 1);
      on_line(std::string_view(partial_), !overlong_);
      partial_.clear();
      overlong_ = false;
    }
  }
  size_t buffered() const { return partial_.size(); }

 private:
  size_t max_;
  std::string partial_;
  bool overlong_ = false;
};

}  // namespace cordon::launcher
