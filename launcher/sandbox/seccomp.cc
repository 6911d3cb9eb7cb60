// The default seccomp filter: built with libseccomp in the parent, cached as raw BPF, loaded with
// one prctl in the program's process.
//
// Shape of the filter (default ALLOW, a deny list — an allow list would break arbitrary agents'
// tools, and the namespaces plus the dropped capabilities are the primary boundary; this filter
// removes kernel attack surface and the few calls that stay dangerous without capabilities):
//  - each name in default_denied_syscalls() (+ policy deny - policy allow) fails with EPERM;
//  - argument filters: socket() families other than unix/inet/inet6/netlink (EAFNOSUPPORT),
//    socket(AF_PACKET), raw and SOCK_PACKET inet sockets, ioctl(TIOCSTI /
//    TIOCLINUX), clone/unshare with CLONE_NEWUSER, personality other than PER_LINUX or a query;
//  - clone3 fails with ENOSYS (see kClone3Why);
//  - only the native ABI (x86_64) is in the filter. A syscall made through another ABI of the same
//    kernel — int $0x80 / sysenter (i386) from a 64-bit process, or x32 numbers (bit 30 set) —
//    carries a different AUDIT_ARCH or number space, so a filter written for x86_64 numbers would
//    not match it: 32-bit __NR_mount is 21, which is access(2) in the 64-bit table. libseccomp's
//    "bad arch" action handles every ABI not in the filter, and its x86_64 filter also sends
//    x32-numbered calls there. We make that action KILL_PROCESS: nothing legitimate in a sandbox
//    of 64-bit programs makes 32-bit syscalls, and a loud SIGSYS beats a silent bypass.
//    (Adding the x86 and x32 arches instead would mean duplicating every rule per ABI, including
//    socketcall(2) multiplexing on i386, whose arguments seccomp cannot inspect.)
#include "launcher/sandbox/seccomp.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "base/replace_file.h"
#include "base/unique_fd.h"
#include "launcher/diagnostics.h"

namespace cordon::launcher {

namespace {

// Bumped when the cache file's layout changes. The rules themselves are covered by the build id
// in the key (build_id_hex), so a rebuilt cordon never loads a filter an older one compiled.
constexpr const char* kFilterFormat = "cordon-seccomp-6";
constexpr const char* kCacheMagic = "cordon-seccomp-cache 1\n";

// Names with argument filters instead of a blanket EPERM. Listing socket, ioctl or personality
// in process.seccomp.allow removes its argument filter (clone, clone3 and unshare cannot be
// allowed, see effective_lists); listing any of them in .deny replaces it by a blanket EPERM.
const std::vector<std::string>& conditional_syscalls() {
  static const std::vector<std::string> names{"socket", "ioctl",   "clone",
                                              "clone3", "unshare", "personality"};
  return names;
}

struct FilterDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using FilterCtx = std::unique_ptr<void, FilterDeleter>;

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& n : s) {
    out += n;
    out += ',';
  }
  return out;
}

// libseccomp reports errors as negative errno values.
Error scmp_error(int rc, const std::string& what) { return Error{what, -rc, ""}; }

struct Effective {
  std::set<std::string> denied;       // blanket EPERM
  std::set<std::string> conditional;  // argument filters kept
  bool notify_userns = false;         // CLONE_NEWUSER to the listener rather than EPERM
};

Result<Effective> effective_lists(const policy::SeccompPolicy& p, SeccompOptions o) {
  Effective e;
  e.denied.insert(default_denied_syscalls().begin(), default_denied_syscalls().end());
  e.conditional.insert(conditional_syscalls().begin(), conditional_syscalls().end());
  e.notify_userns = o.notify_userns && !o.nested_sandbox;
  for (const auto& [field, names] :
       {std::pair{"process.seccomp.deny", &p.deny}, std::pair{"process.seccomp.allow", &p.allow}}) {
    for (size_t i = 0; i < names->size(); ++i) {
      const std::string& n = (*names)[i];
      if (seccomp_syscall_resolve_name(n.c_str()) == __NR_SCMP_ERROR) {
        return make_error(std::string(field) + "[" + std::to_string(i) + "]: \"" + n +
                              "\" is not a syscall known to libseccomp",
                          "use the kernel's name, as in `man 2 syscalls`");
      }
    }
  }
  // The policy loader refuses these already (so `cordon policy check` says it too); a list built
  // another way must not lift the user-namespace filter either.
  if (auto bad = p.invalid_entry()) {
    return make_error(bad->first + ": " + bad->second);
  }
  if (o.nested_sandbox) {
    // The program's own sandbox makes user, mount (and pid, net, ...) namespaces and builds its
    // root with these; in a namespace it owns they act on that namespace alone. Everything else
    // in the filter stays.
    e.conditional.erase("clone");
    e.conditional.erase("unshare");
    for (const auto& n : nested_sandbox_syscalls()) {
      e.denied.erase(n);
    }
  }
  for (const auto& n : p.deny) {
    e.denied.insert(n);
    e.conditional.erase(n);  // a blanket deny subsumes the argument filter
  }
  for (const auto& n : p.allow) {  // allow is applied last: it removes from the default list
    e.denied.erase(n);
    e.conditional.erase(n);
  }
  return e;
}

std::string native_arch_name() {
  switch (seccomp_arch_native()) {
    case SCMP_ARCH_X86_64:
      return "x86_64";
    case SCMP_ARCH_AARCH64:
      return "aarch64";
    default:
      return "arch-" + std::to_string(seccomp_arch_native());
  }
}

// The GNU build id of the running executable (hex), or "" when it has none. It names the code
// that builds the filter: a changed rule means a new binary, hence a new cache key.
const std::string& build_id_hex() {
  static const std::string id = [] {
    std::string out;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          auto* hex = static_cast<std::string*>(data);
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_NOTE) {
              continue;
            }
            auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
            const unsigned char* end = p + ph.p_memsz;
            while (p + sizeof(ElfW(Nhdr)) <= end) {
              auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
              const unsigned char* name = p + sizeof(ElfW(Nhdr));
              const unsigned char* desc = name + ((nh->n_namesz + 3) & ~3u);
              if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
                  std::memcmp(name, "GNU", 4) == 0 && desc + nh->n_descsz <= end) {
                static const char digits[] = "0123456789abcdef";
                for (unsigned k = 0; k < nh->n_descsz; ++k) {
                  hex->push_back(digits[desc[k] >> 4]);
                  hex->push_back(digits[desc[k] & 15]);
                }
                return 1;
              }
              p = desc + ((nh->n_descsz + 3) & ~3u);
            }
          }
          return 1;  // only the first object is the executable itself
        },
        &out);
    return out;
  }();
  return id;
}

// Everything the BPF depends on; the cache key is a hash of it and the file repeats it in full,
// so a hash collision cannot load a different filter.
std::string cache_key_text(const Effective& e) {
  const scmp_version* v = seccomp_version();
  return std::string(kFilterFormat) + "\nbuild " + build_id_hex() + "\nlibseccomp " +
         std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->micro) + "\narch " + native_arch_name() + "\ndeny " + join(e.denied) +
         "\nargs " + join(e.conditional) + "\nnotify-userns " + (e.notify_userns ? "1" : "0") +
         "\n";
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Status add_rule(void* ctx, uint32_t action, const char* name, std::vector<scmp_arg_cmp> args) {
  int nr = seccomp_syscall_resolve_name(name);
  int rc = seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(args.size()),
                                  args.empty() ? nullptr : args.data());
  if (rc != 0) {
    return scmp_error(rc, std::string("seccomp_rule_add(") + name + ")");
  }
  return {};
}

// Argument filters. Comparisons on int-typed arguments mask to the low 32 bits: the kernel
// ignores the upper half, so an exact 64-bit match could be dodged by setting high bits.
// Above AF_MAX (46 on Linux 6.x) with room for families added later.
constexpr int kFamilyLimit = 64;

Status add_conditional_rules(void* ctx, const Effective& e) {
  const std::set<std::string>& which = e.conditional;
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  constexpr uint64_t k32 = 0xffffffffull;
  constexpr uint64_t kTypeMask = 0xf;  // SOCK_TYPE_MASK: the type without NONBLOCK/CLOEXEC
  if (which.count("socket")) {
    // Packet sockets see and forge every frame on an interface.
    TRY(add_rule(ctx, eperm, "socket", {SCMP_A0(SCMP_CMP_MASKED_EQ, k32, AF_PACKET)}));
    // Every other family but AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK is refused: AF_VSOCK
    // reaches the hypervisor around the network namespace and the proxy, and rarely used families
    // (AF_ALG, TIPC, RDS, AF_KEY, ...) are where kernel socket bugs keep turning up.
    // EAFNOSUPPORT, not EPERM, so programs probing for a family fall back as on a kernel without
    // it. libseccomp takes one comparison per argument per rule: one rule per family number, then
    // one for every number past the last family.
    const uint32_t no_family = SCMP_ACT_ERRNO(EAFNOSUPPORT);
    for (int family = 0; family < kFamilyLimit; ++family) {
      if (family == AF_UNIX || family == AF_INET || family == AF_INET6 || family == AF_NETLINK ||
          family == AF_PACKET) {
        continue;
      }
      TRY(add_rule(ctx, no_family, "socket",
                   {SCMP_A0(SCMP_CMP_MASKED_EQ, k32, static_cast<uint64_t>(family))}));
    }
    TRY(add_rule(ctx, no_family, "socket",
                 {SCMP_A0(SCMP_CMP_GE, static_cast<uint64_t>(kFamilyLimit))}));
    for (int family : {AF_INET, AF_INET6}) {
      // Raw IP sockets forge packets; SOCK_PACKET is the obsolete spelling of a packet socket.
      for (int type : {SOCK_RAW, SOCK_PACKET}) {
        TRY(add_rule(ctx, eperm, "socket",
                     {SCMP_A0(SCMP_CMP_MASKED_EQ, k32, static_cast<uint64_t>(family)),
                      SCMP_A1(SCMP_CMP_MASKED_EQ, kTypeMask, static_cast<uint64_t>(type))}));
      }
    }
  }
  if (which.count("ioctl")) {
    // TIOCSTI pushes input into a terminal shared with the host (the user's shell runs what the
    // sandbox typed); TIOCLINUX can do the same on a virtual console.
    for (unsigned long req : {TIOCSTI, TIOCLINUX}) {
      TRY(add_rule(ctx, eperm, "ioctl", {SCMP_A1(SCMP_CMP_MASKED_EQ, k32, req)}));
    }
  }
  // A new user namespace hands back a full capability set (over new namespaces): the start of
  // most container escapes. Other namespace flags need capabilities the program no longer has.
  // With a listener the refusal goes through cordon, which answers EPERM and records it: an
  // agent's own sandbox failing then shows in the log instead of as a mystery.
  const uint32_t newuser = e.notify_userns ? SCMP_ACT_NOTIFY : eperm;
  if (which.count("clone")) {
    TRY(add_rule(ctx, newuser, "clone",
                 {SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)}));
  }
  if (which.count("unshare")) {
    TRY(add_rule(ctx, newuser, "unshare",
                 {SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)}));
  }
  if (which.count("clone3")) {
    // clone3(2) passes its flags inside a struct in user memory, which seccomp (classic BPF over
    // the registers) cannot read, so CLONE_NEWUSER could not be filtered there. ENOSYS makes
    // glibc (>= 2.34) and other callers fall back to clone(2), whose flags are in a register and
    // filtered above. EPERM would not do: callers treat EPERM as final and do not fall back.
    TRY(add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", {}));
  }
  if (which.count("personality")) {
    // Allowed: PER_LINUX (0) and the query 0xffffffff; other personalities change the memory
    // layout and exec semantics (READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ...). libseccomp allows one
    // comparison per argument per rule, so "x is neither all-zero nor all-one bits" is written
    // as "some pair of adjacent bits differs": 31 pairs x 2 orders, each rule a masked compare.
    for (int i = 0; i < 31; ++i) {
      uint64_t pair = 3ull << i;
      TRY(add_rule(ctx, eperm, "personality", {SCMP_A0(SCMP_CMP_MASKED_EQ, pair, 1ull << i)}));
      TRY(add_rule(ctx, eperm, "personality", {SCMP_A0(SCMP_CMP_MASKED_EQ, pair, 2ull << i)}));
    }
  }
  return {};
}

Result<std::vector<unsigned char>> build_bpf(const Effective& e) {
  FilterCtx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) {
    return make_error("seccomp_init(SCMP_ACT_ALLOW) failed");
  }
  // Every ABI not in the filter (i386 via int $0x80, x32) is killed; see the file comment.
  int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc != 0) {
    return scmp_error(rc, "seccomp_attr_set(ACT_BADARCH, KILL_PROCESS)");
  }
  // no_new_privs is set by drop_privileges(); the filter is loaded with our own prctl.
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0);
  if (rc != 0) {
    return scmp_error(rc, "seccomp_attr_set(CTL_NNP, 0)");
  }
  // A binary search over syscall numbers instead of a linear chain: with a default-allow filter
  // every syscall would otherwise walk past all ~60 deny entries. Best effort: only speed, so a
  // libseccomp without it gets the linear filter, unsaid.
  (void)seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2);
  for (const auto& name : e.denied) {
    // Names that exist only on other ABIs (vm86, vm86old on i386) resolve to a negative
    // pseudo-number here; those ABIs are killed wholesale, so there is nothing to add.
    if (seccomp_syscall_resolve_name_arch(SCMP_ARCH_NATIVE, name.c_str()) < 0) {
      continue;
    }
    TRY(add_rule(ctx.get(), SCMP_ACT_ERRNO(EPERM), name.c_str(), {}));
  }
  TRY(add_conditional_rules(ctx.get(), e));

  // Export into a memfd and read it back: libseccomp only exports to a file descriptor.
  UniqueFd mem(::memfd_create("cordon-seccomp", MFD_CLOEXEC));
  if (!mem) {
    return sys_error("memfd_create(\"cordon-seccomp\")");
  }
  rc = seccomp_export_bpf(ctx.get(), mem.get());
  if (rc != 0) {
    return scmp_error(rc, "seccomp_export_bpf");
  }
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0) {
    return make_error("seccomp_export_bpf produced " + std::to_string(size) +
                      " bytes, not a whole number of BPF instructions");
  }
  std::vector<unsigned char> bpf(static_cast<size_t>(size));
  if (::pread(mem.get(), bpf.data(), bpf.size(), 0) != size) {
    return sys_error("pread(seccomp memfd)");
  }
  return bpf;
}

// ---- the on-disk cache ----------------------------------------------------------------------

std::string cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/') {
    return std::string(x) + "/cordon";
  }
  if (::geteuid() == 0) {
    return "/var/cache/cordon";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') {
    return std::string(h) + "/.cache/cordon";
  }
  return "";
}

// A cache file is only trusted in a directory and file we own that nobody else can write:
// a filter loaded from disk decides what the sandbox may do.
bool private_to_us(const struct stat& st) {
  return st.st_uid == ::geteuid() && (st.st_mode & 022) == 0;
}

bool ensure_private_dir(const std::string& dir) {
  // mkdir -p for the last two components ($XDG_CACHE_HOME itself may not exist yet).
  size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    ::mkdir(dir.substr(0, slash).c_str(), 0700);
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return false;
  }
  struct stat st {};
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && private_to_us(st);
}

std::optional<std::vector<unsigned char>> read_cache(const std::string& path,
                                                     const std::string& key) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || !private_to_us(st)) {
    say("ignoring seccomp cache " + path + ": not a private regular file of ours");
    return std::nullopt;
  }
  std::string header = kCacheMagic + key;
  size_t max = header.size() + BPF_MAXINSNS * sizeof(sock_filter);
  if (st.st_size <= static_cast<off_t>(header.size()) || st.st_size > static_cast<off_t>(max)) {
    return std::nullopt;
  }
  std::vector<unsigned char> all(static_cast<size_t>(st.st_size));
  if (::pread(fd.get(), all.data(), all.size(), 0) != st.st_size) {
    return std::nullopt;
  }
  if (std::string(all.begin(), all.begin() + static_cast<long>(header.size())) != header) {
    return std::nullopt;  // a different filter with the same hash, or an old format
  }
  std::vector<unsigned char> bpf(all.begin() + static_cast<long>(header.size()), all.end());
  if (bpf.empty() || bpf.size() % sizeof(sock_filter) != 0) {
    return std::nullopt;
  }
  return bpf;
}

void write_cache(const std::string& path, const std::string& key,
                 const std::vector<unsigned char>& bpf) {
  std::string data = kCacheMagic + key;
  data.append(bpf.begin(), bpf.end());
  // Atomic: a complete file appears under its final name or nothing does. A failure is not
  // reported: the cache only saves time, and the next run compiles the filter again.
  (void)replace_file(path, data, {.mode = 0600});
}

}  // namespace

const std::vector<std::string>& default_denied_syscalls() {
  static const std::vector<std::string> names{
      // Replacing or extending the running kernel.
      "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
      "create_module", "get_kernel_syms", "query_module",
      // Large kernel attack surfaces with a history of exploits, rarely needed by agents.
      "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
      "io_uring_register",
      // The kernel keyring is not namespaced: keys can leak between sandbox and host.
      "add_key", "request_key", "keyctl",
      // Mount table and namespace changes; the sandbox's view is composed by cordon.
      "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
      "fspick", "mount_setattr", "setns",
      // File handles bypass path-based access checks (the "shocker" escape).
      "open_by_handle_at", "name_to_handle_at",
      // Host-global state: accounting, swap, power, clocks, kernel log, quotas.
      "acct", "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime",
      "adjtimex", "syslog", "quotactl", "quotactl_fd",
      // Obsolete or hardware-level interfaces.
      "lookup_dcookie", "vm86", "vm86old", "uselib", "nfsservctl", "iopl", "ioperm", "sysfs",
      "ustat", "_sysctl",
      // fanotify can watch (and with permission events, stall) whole filesystems.
      "fanotify_init",
      // Deliberately NOT here: ptrace and process_vm_readv/writev (gdb and strace work inside;
      // the pid namespace and uid confine them to the sandbox's own processes, and since Linux
      // 4.8 a tracer cannot skip seccomp), kcmp (harmless comparisons), landlock_* (lets the
      // program restrict itself further), seccomp (a filter can only add restrictions).
  };
  return names;
}

const std::vector<std::string>& nested_sandbox_syscalls() {
  static const std::vector<std::string> names{"mount", "umount2", "pivot_root"};
  return names;
}

Result<SeccompProgram> compile_seccomp(const policy::SeccompPolicy& p, SeccompOptions o) {
  ASSIGN_OR_RETURN(Effective e, effective_lists(p, o));
  std::string key = cache_key_text(e);

  char name[64];
  std::snprintf(name, sizeof name, "seccomp-%016llx.bpf",
                static_cast<unsigned long long>(fnv1a64(key)));
  std::string dir = cache_dir();
  std::string path = dir + "/" + name;

  // Compiled once per process (per cache location); then once per host through the cache file.
  static std::mutex mu;
  static std::map<std::string, std::vector<unsigned char>> memo;
  std::lock_guard<std::mutex> lock(mu);
  std::string memo_key = path + "\n" + key;
  if (auto it = memo.find(memo_key); it != memo.end()) {
    return SeccompProgram{it->second, e.notify_userns};
  }
  // Without a build id nothing ties a cache file to the code that wrote it: compile every time.
  bool cache_ok = !build_id_hex().empty() && !dir.empty() && ensure_private_dir(dir);
  if (cache_ok) {
    if (auto cached = read_cache(path, key)) {
      memo.emplace(memo_key, *cached);
      return SeccompProgram{std::move(*cached), e.notify_userns};
    }
  }
  ASSIGN_OR_RETURN(std::vector<unsigned char> bpf, build_bpf(e));
  if (cache_ok) {
    write_cache(path, key, bpf);
  }
  memo.emplace(memo_key, bpf);
  return SeccompProgram{std::move(bpf), e.notify_userns};
}

Status install_seccomp(const SeccompProgram& prog, UniqueFd* listener) {
  // Child side: no allocation on the success path.
  if (prog.bpf.empty() || prog.bpf.size() % sizeof(sock_filter) != 0) {
    return make_error("install_seccomp: empty or malformed BPF program");
  }
  if (prog.listener && listener == nullptr) {
    return make_error("install_seccomp: the filter needs a listener and none is taken");
  }
  sock_fprog fprog{};
  fprog.len = static_cast<unsigned short>(prog.bpf.size() / sizeof(sock_filter));
  // The kernel only reads the instructions; sock_fprog just lacks a const pointer.
  fprog.filter = reinterpret_cast<sock_filter*>(const_cast<unsigned char*>(prog.bpf.data()));
  unsigned flags = prog.listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
  long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
  if (rc < 0) {
    return sys_error(
        prog.listener ? "seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER)"
                      : "seccomp(SECCOMP_SET_MODE_FILTER)",
        errno == EACCES  ? "no_new_privs must be set first: call drop_privileges()"
        : errno == EBUSY ? "a filter with a listener is in force already (cordon inside cordon?)"
                         : "");
  }
  if (prog.listener) {
    listener->reset(static_cast<int>(rc));
  }
  return {};
}

}  // namespace cordon::launcher
