// The terminal: a pty allocated INSIDE the sandbox's devpts (child side), and on the host the
// raw-mode guard plus the byte relay between the real terminal and the pty master (parent side).
#pragma once

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>

#include <optional>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace cordon::launcher {

struct PtyPair {
  UniqueFd master;  // goes to the parent over the report channel
  UniqueFd slave;   // becomes the program's stdin/stdout/stderr and controlling tty
};

// Child side, after the sandbox's /dev/pts is mounted: opens /dev/pts/ptmx, unlocks it, gets the
// peer (TIOCGPTPEER: no path lookup) and sets the initial window size before the program starts,
// so `stty size` is right from the first instruction.
Result<PtyPair> open_pty_in_child(const std::optional<winsize>& window);

// Program side, after setsid(): makes `slave` the controlling terminal and fds 0-2.
Status attach_terminal_in_program(int slave);

// Parent side: puts a terminal in raw mode; the destructor restores the saved mode on every path
// (signals are handled synchronously through signalfd, so they take the normal exit path).
class RawTerminal {
 public:
  RawTerminal() = default;
  // Input the terminal already holds complete in canonical mode (lines typed ahead, end-of-file
  // marks) is read out first and kept in `typed_ahead`: switched to raw mode as it is, the kernel
  // would hand a pending end-of-file over as a NUL byte (script(1) sends one when its own input
  // ends), which the program would read and its pty echo as "^@".
  static Result<RawTerminal> enter(int fd, std::string& typed_ahead);
  RawTerminal(RawTerminal&& o) noexcept : fd_(o.fd_), saved_(o.saved_) { o.fd_ = -1; }
  RawTerminal& operator=(RawTerminal&& o) noexcept;
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  ~RawTerminal() { restore(); }
  void restore();

 private:
  int fd_ = -1;
  termios saved_{};
};

// Parent side: the byte pump. Non-blocking master, bounded buffers in each direction; the
// supervisor's poll loop asks for its pollfds and hands back the events.
class PtyRelay {
 public:
  // `typed_ahead` goes to the program first (RawTerminal::enter).
  PtyRelay(int in_fd, int out_fd, UniqueFd master, std::string typed_ahead);
  // Copies the window size of `from` to the pty (start and SIGWINCH); the kernel then signals the
  // pty's foreground process group itself.
  void copy_window_size(int from) const;
  // Fills up to 3 pollfds (stdin, master, stdout); returns how many.
  int fill(pollfd* fds);
  void handle(const pollfd* fds, int n);
  // True once the master reported EOF/EIO (every slave closed) and its output was written out.
  bool done() const { return master_closed_ && to_out_.empty(); }
  int master() const { return master_.get(); }
  // While held (`run --ask`'s question is open), nothing is read from the terminal: what is typed
  // then is for cordon's prompt, never for the program. Nor is anything written to the terminal:
  // the program's output waits in the relay (bounded; beyond it the relay stops reading the pty
  // and the program blocks in write), so it cannot redraw the question, and is written out, all
  // of it, once the hold ends.
  void hold(bool held) { held_ = held; }

 private:
  int in_, out_;
  UniqueFd master_;
  std::string to_master_, to_out_;
  bool in_closed_ = false, master_closed_ = false, held_ = false;
};

}  // namespace cordon::launcher
