// The preload shim in `cordon run`: the library and the collector's socket as the sandbox sees
// them, and the collector thread that turns shim messages into the session's events.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "launcher/plan.h"
#include "preload_shim/collector/collector.h"
#include "record/limiter.h"

namespace cordon::launcher {

// Fixed paths inside the sandbox. The library path is what the sandbox's /etc/ld.so.preload
// names, so programs that clear LD_PRELOAD keep the shim; the socket path is the shim's default
// (preload_shim/config.cc), so children that clear CORDON_SHIM_SOCK still report.
inline constexpr char kShimLibraryInSandbox[] = "/run/cordon/libcordon_preload.so";
inline constexpr char kShimSocketInSandbox[] = "/run/cordon/shim.sock";

// libcordon_preload.so on the host: $CORDON_PRELOAD_LIB, else beside the running cordon (the build
// tree's preload_shim/), else the installed copy. An error names every place it looked.
Result<std::string> find_preload_library();

// Whether `cordon run` injects the shim: on unless CORDON_SHIM=off in cordon's own environment
// (a switch for debugging and for the with/without comparisons in the tests; the sandboxed
// program cannot change cordon's environment).
bool shim_enabled();

// The collector of one session. Lifecycle around the raw clone (which no second thread may
// cross): prepare() and add_to_plan() before it, start() after it, stop() once the program ended.
class ShimSession {
 public:
  // Binds the collector's socket in `runtime_dir` (created when `own_dir`, removed again by the
  // destructor) and opens the session's events.jsonl for records with "source": "shim". The
  // socket is made the sandbox id's own (mode 0600): nobody else on the host can forge records.
  // No thread yet.
  static Result<ShimSession> prepare(const std::string& runtime_dir, bool own_dir,
                                     const std::string& events_path, const std::string& session_id,
                                     const record::RecordLimits& limits, const std::string& library,
                                     const IdPlan& ids);
  ShimSession(ShimSession&&) noexcept;
  ShimSession& operator=(ShimSession&&) noexcept;
  ~ShimSession();

  // Writes /etc/ld.so.preload and binds the library and the socket into the sandbox at the fixed
  // paths (read-only binds: connect(2) to a socket needs no writable mount).
  Status add_to_plan(LaunchPlan& plan) const;

  // After the clone: serves on a thread of its own until stop().
  Status start();
  // Stops the thread (it drains what is queued first) and joins it. Idempotent.
  void stop();

  // The canaries' decoys, which the collector tells apart from files of the same name
  // (Collector::set_decoys).
  void set_decoys(std::vector<preload_shim::Collector::DecoyId> decoys);

  uint64_t events_written() const;
  // Where the collector listens and the library the sandbox's id can read, on the host (the
  // --no-namespaces run points the program at them directly).
  const std::string& socket_path() const { return socket_path_; }
  const std::string& library_path() const { return library_path_; }

 private:
  ShimSession() = default;
  void remove_runtime_files();

  std::unique_ptr<preload_shim::Collector> collector_;
  UniqueFd stop_fd_;  // eventfd: readable = stop
  std::string socket_path_;
  std::string library_path_;  // the host path bound into the sandbox
  std::string runtime_dir_;   // removed at the end when cordon created it
  std::string library_copy_;  // a copy cordon made in runtime_dir_ (see prepare)
  std::thread thread_;
};

// The one call before the clone: nullptr when the shim is off (CORDON_SHIM=off); otherwise a
// prepared collector whose socket the sandbox's `ids` can reach (add_to_plan() binds it in).
Result<std::unique_ptr<ShimSession>> prepare_shim_from_parent(const std::string& session_dir,
                                                              const std::string& events_path,
                                                              const std::string& session_id,
                                                              const record::RecordLimits& limits,
                                                              const IdPlan& ids);

}  // namespace cordon::launcher
