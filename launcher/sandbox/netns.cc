// The network namespace, child side: lo up; with network on, routes into lo, the proxy's sockets
// and the capture ruleset (through cordon-capture.so, see capture_plugin.h).
#include "launcher/sandbox/netns.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <limits.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "launcher/channel.h"
#include "launcher/companion.h"
#include "launcher/sandbox/capture_plugin/capture_plugin.h"

namespace cordon::launcher {
namespace {

// The kernel features the capture needs, named in every failure of its steps.
constexpr const char* kCaptureHint =
    "network.allow needs, in the sandbox's own network namespace: nf_tables with NAT redirect "
    "and NFLOG (modprobe nf_tables nft_redirect nf_nat nfnetlink_log; CONFIG_NF_TABLES, "
    "CONFIG_NFT_REDIR, CONFIG_NFT_NAT, CONFIG_NETFILTER_NETLINK_LOG) and CAP_NET_ADMIN there "
    "(granted by the sandbox's user namespace); or drop network.allow / --allow-host to run "
    "without network";

// Appends one rtnetlink attribute; false if it does not fit.
bool add_attr(nlmsghdr* h, size_t cap, uint16_t type, const void* data, size_t len) {
  size_t at = NLMSG_ALIGN(h->nlmsg_len);
  if (at + RTA_SPACE(len) > cap) {
    return false;
  }
  auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(h) + at);
  rta->rta_type = type;
  rta->rta_len = static_cast<uint16_t>(RTA_LENGTH(len));
  std::memcpy(RTA_DATA(rta), data, len);
  h->nlmsg_len = static_cast<uint32_t>(at + RTA_SPACE(len));
  return true;
}

// `ip route add default dev lo src 127.0.0.1` (or `-6 ... src ::1`) over rtnetlink. The source
// address is required: without it, packets to non-local addresses leave lo from 0.0.0.0 / ::,
// the proxy's replies no longer match the REDIRECT's conntrack entry and clients drop them.
Status add_default_route_via_lo(int family) {
  const char* what = family == AF_INET ? "rtnetlink RTM_NEWROUTE default dev lo src 127.0.0.1"
                                       : "rtnetlink RTM_NEWROUTE default dev lo src ::1";
  UniqueFd nl(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!nl) {
    return sys_error("socket(AF_NETLINK, NETLINK_ROUTE)");
  }
  alignas(nlmsghdr) char buf[256] = {};
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  h->nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  h->nlmsg_type = RTM_NEWROUTE;
  h->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  h->nlmsg_seq = 1;
  auto* r = static_cast<rtmsg*>(NLMSG_DATA(h));
  r->rtm_family = static_cast<unsigned char>(family);
  r->rtm_dst_len = 0;  // default
  r->rtm_table = RT_TABLE_MAIN;
  r->rtm_protocol = RTPROT_BOOT;
  // As `ip` does for a route with a device and no gateway: link scope (IPv6 ignores scope).
  r->rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
  r->rtm_type = RTN_UNICAST;
  uint32_t oif = ::if_nametoindex("lo");
  if (oif == 0) {
    return sys_error("if_nametoindex(\"lo\")");
  }
  bool fits = add_attr(h, sizeof buf, RTA_OIF, &oif, sizeof oif);
  if (family == AF_INET) {
    in_addr src{htonl(INADDR_LOOPBACK)};
    fits = fits && add_attr(h, sizeof buf, RTA_PREFSRC, &src, sizeof src);
  } else {
    in6_addr src = IN6ADDR_LOOPBACK_INIT;
    fits = fits && add_attr(h, sizeof buf, RTA_PREFSRC, &src, sizeof src);
  }
  if (!fits) {
    return make_error(std::string(what) + ": message buffer too small");
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.get(), buf, h->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    return sys_error(std::string("sendto(") + what + ")");
  }
  alignas(nlmsghdr) char reply[1024];
  ssize_t n;
  do {
    n = ::recv(nl.get(), reply, sizeof reply, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return sys_error(std::string("recv(") + what + " ack)");
  }
  auto* a = reinterpret_cast<nlmsghdr*>(reply);
  if (!NLMSG_OK(a, static_cast<size_t>(n)) || a->nlmsg_type != NLMSG_ERROR ||
      a->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
    return make_error(std::string(what) + ": unexpected reply from the kernel");
  }
  int err = static_cast<nlmsgerr*>(NLMSG_DATA(a))->error;
  if (err != 0) {
    errno = -err;
    return sys_error(what);
  }
  return {};
}

Status set_int(int fd, int level, int opt, int value, const char* what) {
  if (::setsockopt(fd, level, opt, &value, sizeof value) != 0) {
    return sys_error(what);
  }
  return {};
}

// A socket on [::]:port serving IPv4 too (v4-mapped), or on 0.0.0.0:port where the kernel has no
// IPv6. Bound in the sandbox's namespace: only its lo (and the REDIRECTed flows) reach it.
Result<UniqueFd> bind_any(int type, uint16_t port, bool ipv6, const char* role) {
  const std::string where = std::string(ipv6 ? "[::]:" : "0.0.0.0:") + std::to_string(port) + " (" +
                            role + ", in the sandbox's network namespace)";
  UniqueFd fd(::socket(ipv6 ? AF_INET6 : AF_INET, type | SOCK_CLOEXEC, 0));
  if (!fd) {
    return sys_error("socket() for " + where);
  }
  if (ipv6) {
    TRY(set_int(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, 0, "setsockopt(IPV6_V6ONLY, 0)"));
  }
  int rc;
  if (ipv6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(port);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) {
    return sys_error("bind(" + where + ")");
  }
  if (type == SOCK_STREAM && ::listen(fd.get(), SOMAXCONN) != 0) {
    return sys_error("listen(" + where + ")");
  }
  return fd;
}

Result<UniqueFd> listen_loopback_v4(uint16_t port, const char* role) {
  const std::string where = "127.0.0.1:" + std::to_string(port) + " (" + role + ")";
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return sys_error("socket() for " + where);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return sys_error("bind(" + where + ")");
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    return sys_error("listen(" + where + ")");
  }
  return fd;
}

// cordon-capture.so beside the running cordon (build tree and install both put it there), else
// in CORDON_LIBEXECDIR. Looked up here, before the sandbox's root replaces the host's.
std::string capture_plugin_path() {
  std::string installed = std::string(CORDON_LIBEXECDIR) + "/" + kCapturePluginFile;
  // Not found: dlopen of the installed path then names what is missing.
  return find_companion(kCapturePluginFile, "launcher", installed, R_OK).value_or(installed);
}

// The plugin, loaded once (it stays: the child execs or exits soon, which unloads it anyway).
Result<void*> load_capture_plugin() {
  std::string path = capture_plugin_path();
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    return make_error("dlopen(\"" + path + "\"): " + (why ? why : "unknown error"),
                      "install cordon completely (cordon-capture.so and libnftables1); " +
                          std::string(kCaptureHint));
  }
  return h;
}

}  // namespace

void preload_capture_plugin() {
  // RTLD_NODELETE: the handle is dropped, the libraries stay for the child's dlopen to find.
  std::string path = capture_plugin_path();
  if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE); h != nullptr) {
    ::dlclose(h);
  }
}

namespace {

template <typename Fn>
Result<Fn> plugin_symbol(void* h, const char* name) {
  void* sym = ::dlsym(h, name);
  if (sym == nullptr) {
    return make_error(std::string("dlsym(cordon-capture.so, ") + name + "): not found",
                      "cordon-capture.so is from another build of cordon: reinstall cordon");
  }
  return reinterpret_cast<Fn>(sym);
}

CordonCaptureArgs capture_args(const std::vector<LoopbackService>& loopback = {}) {
  CordonCaptureArgs args{};
  args.size = sizeof args;
  args.proxy_port = kTransparentPort;
  args.dns_port = kDnsPort;
  args.nflog_group = kNflogGroup;
  for (const auto& l : loopback) {
    if (args.n_loopback >= CORDON_CAPTURE_MAX_LOOPBACK) {
      break;  // the plan refuses more
    }
    CordonCaptureLoopback& c = args.loopback[args.n_loopback++];
    c.v6 = l.net.addr.v6 ? 1 : 0;
    c.prefix = static_cast<uint8_t>(l.net.prefix);
    std::memcpy(c.addr, l.net.addr.bytes.data(), sizeof c.addr);
    c.port_lo = l.port_lo;
    c.port_hi = l.port_hi;
  }
  return args;
}

// Bound before the ruleset exists, so the first packet it drops is already read back as an event.
Result<UniqueFd> open_nflog(void* plugin) {
  ASSIGN_OR_RETURN(auto fn,
                   plugin_symbol<CordonCaptureOpenNflogFn>(plugin, kCaptureOpenNflogSymbol));
  CordonCaptureArgs args = capture_args();
  char err[2048] = {};
  int fd = fn(&args, err, sizeof err);
  if (fd < 0) {
    return make_error(std::string("NFLOG socket for the capture's refusals: ") + err, kCaptureHint);
  }
  return UniqueFd(fd);
}

Status install_capture(void* plugin, const std::vector<LoopbackService>& loopback) {
  ASSIGN_OR_RETURN(auto fn, plugin_symbol<CordonCaptureInstallFn>(plugin, kCaptureInstallSymbol));
  CordonCaptureArgs args = capture_args(loopback);
  char err[2048] = {};
  if (fn(&args, err, sizeof err) != 0) {
    return make_error(std::string("network capture ruleset: ") + err, kCaptureHint);
  }
  return {};
}

// Everything but the ruleset: routes, the proxy's sockets, the plugin and its NFLOG socket.
Result<CaptureSockets> open_capture_in_child(bool explicit_proxy, void** plugin) {
  // A kernel without IPv6 (ipv6.disable=1) has no v6 to capture: IPv4 only then.
  bool ipv6 = true;
  if (UniqueFd probe(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0)); !probe) {
    if (errno != EAFNOSUPPORT) {
      return sys_error("socket(AF_INET6, SOCK_DGRAM)");
    }
    ipv6 = false;
  }
  TRY(add_default_route_via_lo(AF_INET));
  if (ipv6) {
    TRY(add_default_route_via_lo(AF_INET6));
  }
  CaptureSockets s;
  ASSIGN_OR_RETURN(s.transparent, bind_any(SOCK_STREAM, kTransparentPort, ipv6, "transparent"));
  ASSIGN_OR_RETURN(s.dns_udp, bind_any(SOCK_DGRAM, kDnsPort, ipv6, "DNS"));
  ASSIGN_OR_RETURN(s.dns_tcp, bind_any(SOCK_STREAM, kDnsPort, ipv6, "DNS over TCP"));
  if (explicit_proxy) {
    ASSIGN_OR_RETURN(s.explicit_proxy, listen_loopback_v4(kExplicitProxyPort, "explicit proxy"));
  }
  ASSIGN_OR_RETURN(*plugin, load_capture_plugin());
  // Bound before the ruleset exists, so the first packet it drops is already read back.
  ASSIGN_OR_RETURN(s.nflog, open_nflog(*plugin));
  return s;
}

}  // namespace

Status bring_up_loopback_in_child() {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) {
    return sys_error("socket(AF_INET, SOCK_DGRAM) to configure lo");
  }
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) {
    return sys_error("ioctl(SIOCGIFFLAGS, \"lo\")");
  }
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) {
    return sys_error("ioctl(SIOCSIFFLAGS, \"lo\", IFF_UP)");
  }
  return {};
}

Status send_capture_sockets(int report_fd, const CaptureSockets& s) {
  int fds[kMaxMsgFds];
  size_t n = 0;
  std::string roles;
  auto add = [&](const UniqueFd& fd, const char* role) {
    if (fd) {
      fds[n++] = fd.get();
      roles += roles.empty() ? role : std::string(",") + role;
    }
  };
  add(s.transparent, "transparent");
  add(s.dns_udp, "dns");
  add(s.dns_tcp, "dns-tcp");
  add(s.explicit_proxy, "listen");
  add(s.nflog, "nflog");
  if (!send_msg_fds(report_fd, MsgKind::NetSockets, 0, roles.c_str(), fds, n)) {
    return sys_error("sendmsg(capture sockets to cordon)");
  }
  return {};
}

Status capture_network_in_child(bool network, bool explicit_proxy,
                                const std::vector<LoopbackService>& loopback, int report_fd) {
  if (!network) {
    return {};
  }
  void* plugin = nullptr;
  ASSIGN_OR_RETURN(CaptureSockets s, open_capture_in_child(explicit_proxy, &plugin));
  // The sockets go to cordon before the ruleset is installed, so cordon-netproxy starts on the
  // host side while libnftables works here. Nothing runs in the sandbox yet to use them early,
  // and the program starts only once both are done (contain.cc, wait_for_program_release): a
  // ruleset that fails still fails the launch before the program exists.
  TRY(send_capture_sockets(report_fd, s));
  s = CaptureSockets();  // the proxy holds the only copies from now on
  // Last: from here on, whatever the sandbox sends is redirected to those sockets or dropped.
  return install_capture(plugin, loopback);
}

Status try_capture_ruleset_in_child() {
  ASSIGN_OR_RETURN(void* plugin, load_capture_plugin());
  ASSIGN_OR_RETURN(UniqueFd nflog, open_nflog(plugin));
  return install_capture(plugin, {});
}

Result<CaptureSockets> capture_sockets_from_msg(const std::string& roles, UniqueFd first,
                                                std::vector<UniqueFd> rest) {
  CaptureSockets s;
  size_t i = 0, start = 0;
  while (start <= roles.size() && !roles.empty()) {
    size_t comma = roles.find(',', start);
    std::string role = roles.substr(start, comma == std::string::npos ? comma : comma - start);
    UniqueFd fd;
    if (i == 0) {
      fd = std::move(first);
    } else if (i - 1 < rest.size()) {
      fd = std::move(rest[i - 1]);
    }
    if (!fd) {
      return make_error("capture sockets from the sandbox: no fd for \"" + role + "\"");
    }
    UniqueFd* slot = role == "transparent" ? &s.transparent
                     : role == "dns"       ? &s.dns_udp
                     : role == "dns-tcp"   ? &s.dns_tcp
                     : role == "listen"    ? &s.explicit_proxy
                     : role == "nflog"     ? &s.nflog
                                           : nullptr;
    if (slot == nullptr) {
      return make_error("capture sockets from the sandbox: unknown role \"" + role + "\"");
    }
    *slot = std::move(fd);
    ++i;
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  if (!s.transparent || !s.dns_udp || !s.dns_tcp) {
    return make_error("capture sockets from the sandbox: incomplete set \"" + roles + "\"");
  }
  return s;
}

}  // namespace cordon::launcher
