// The NFLOG socket (nfnetlink_log configuration by hand: no libnetfilter_log) and the rate bound
// on drop events.
#include "netproxy/nflog.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cordon::netproxy {

namespace {

// Bytes of each dropped packet copied to us: enough for an IPv6 header, a few extension headers
// and the transport ports; the payload itself is never needed (and never logged).
constexpr uint32_t kCopyRange = 128;
// Delivery: up to 32 packets per netlink message or after 50 ms, whichever comes first, so a
// flood costs one wakeup per batch and a single packet shows up promptly.
constexpr uint32_t kQueueThreshold = 32;
constexpr uint32_t kFlushTimeoutCs = 5;  // in 1/100 s
constexpr int kReceiveBuffer = 1 << 20;

// Appends one attribute (type, value) padded to 4 bytes.
void put_attr(std::vector<uint8_t>* msg, uint16_t type, const void* value, uint16_t len) {
  nlattr a{};
  a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
  a.nla_type = type;
  const auto* ap = reinterpret_cast<const uint8_t*>(&a);
  msg->insert(msg->end(), ap, ap + sizeof a);
  const auto* vp = static_cast<const uint8_t*>(value);
  msg->insert(msg->end(), vp, vp + len);
  msg->resize(NLMSG_ALIGN(msg->size()), 0);
}

// Sends one NFULNL_MSG_CONFIG for `group` with the attribute built by `fill`, and reads the ack.
template <typename Fill>
Status configure(int fd, uint16_t group, uint32_t seq, const std::string& what, Fill fill) {
  std::vector<uint8_t> msg(NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)), 0);
  fill(&msg);
  nlmsghdr h{};
  h.nlmsg_len = static_cast<uint32_t>(msg.size());
  h.nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
  h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  h.nlmsg_seq = seq;
  nfgenmsg g{};
  g.nfgen_family = AF_UNSPEC;
  g.version = NFNETLINK_V0;
  g.res_id = htons(group);
  std::memcpy(msg.data(), &h, sizeof h);
  std::memcpy(msg.data() + NLMSG_HDRLEN, &g, sizeof g);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) <
      0) {
    return sys_error("sendto(NETLINK_NETFILTER, NFULNL_MSG_CONFIG " + what + ", group " +
                     std::to_string(group) + ")");
  }
  // The kernel handles the request inside sendto(): the ack is already queued.
  alignas(nlmsghdr) uint8_t buf[512];
  ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) {
    return sys_error("recv(NETLINK_NETFILTER ack for " + what + ", group " + std::to_string(group) +
                     ")");
  }
  const auto* r = reinterpret_cast<const nlmsghdr*>(buf);
  if (static_cast<size_t>(n) < NLMSG_HDRLEN + sizeof(nlmsgerr) || r->nlmsg_type != NLMSG_ERROR) {
    return make_error("nfnetlink_log " + what + " for group " + std::to_string(group) +
                      ": the kernel's answer is not an ack");
  }
  const auto* e = reinterpret_cast<const nlmsgerr*>(buf + NLMSG_HDRLEN);
  if (e->error != 0) {
    errno = -e->error;
    std::string hint =
        errno == EBUSY   ? "another socket in this network namespace is bound to the group"
        : errno == EPERM ? "needs CAP_NET_ADMIN in the network namespace's user namespace"
                         : "is nfnetlink_log (CONFIG_NETFILTER_NETLINK_LOG) available?";
    return sys_error("nfnetlink_log " + what + " for group " + std::to_string(group), hint);
  }
  return {};
}

std::string destination(const wire::DroppedPacket& p) {
  std::string a = p.dst.to_string();
  if (!p.port) {
    return a;
  }
  return (p.dst.v6 ? "[" + a + "]" : a) + ":" + std::to_string(*p.port);
}

}  // namespace

Result<UniqueFd> open_nflog_socket(uint16_t group) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
  if (!fd) {
    return sys_error("socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER)",
                     "the seccomp filter or a missing CONFIG_NETFILTER_NETLINK may refuse it");
  }
  sockaddr_nl self{};
  self.nl_family = AF_NETLINK;  // nl_pid 0: the kernel assigns our port id
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&self), sizeof self) != 0) {
    return sys_error("bind(NETLINK_NETFILTER socket)");
  }
  // A flood of dropped packets must not overrun the socket before the proxy reads it; FORCE
  // needs CAP_NET_ADMIN, which the caller has in this namespace, else the ordinary limit.
  int size = kReceiveBuffer;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0) {
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  uint32_t seq = 1;
  TRY(configure(fd.get(), group, seq++, "bind", [](std::vector<uint8_t>* m) {
    nfulnl_msg_config_cmd cmd{NFULNL_CFG_CMD_BIND};
    put_attr(m, NFULA_CFG_CMD, &cmd, sizeof cmd);
  }));
  TRY(configure(fd.get(), group, seq++, "copy mode", [](std::vector<uint8_t>* m) {
    nfulnl_msg_config_mode mode{};
    mode.copy_range = htonl(kCopyRange);
    mode.copy_mode = NFULNL_COPY_PACKET;
    put_attr(m, NFULA_CFG_MODE, &mode, sizeof mode);
  }));
  TRY(configure(fd.get(), group, seq++, "queue threshold", [](std::vector<uint8_t>* m) {
    uint32_t q = htonl(kQueueThreshold);
    put_attr(m, NFULA_CFG_QTHRESH, &q, sizeof q);
  }));
  TRY(configure(fd.get(), group, seq++, "flush timeout", [](std::vector<uint8_t>* m) {
    uint32_t t = htonl(kFlushTimeoutCs);
    put_attr(m, NFULA_CFG_TIMEOUT, &t, sizeof t);
  }));
  return fd;
}

bool DropEventLimiter::admit(const wire::DroppedPacket& p, Clock::time_point now) {
  if (now >= window_end_ && !pending()) {
    window_end_ = now + std::chrono::seconds(1);
    in_window_ = 0;
  }
  if (in_window_ < per_second_ && now < window_end_) {
    ++in_window_;
    return true;
  }
  ++summary_.suppressed;
  ++summary_.protos[p.proto];
  auto d = destination(p);
  auto& list = summary_.destinations;
  if (list.size() < DropSummary::kMaxListed &&
      std::find(list.begin(), list.end(), d) == list.end()) {
    list.push_back(std::move(d));
  }
  return false;
}

std::optional<DropSummary> DropEventLimiter::flush(Clock::time_point now, bool force) {
  if (!pending() || (!force && now < window_end_)) {
    return std::nullopt;
  }
  auto out = std::move(summary_);
  summary_ = {};
  // The next window starts with the next packet.
  window_end_ = now;
  in_window_ = 0;
  return out;
}

nlohmann::json drop_event(const wire::DroppedPacket& p, const std::string& name) {
  nlohmann::json ev = {{"mode", "netfilter"}, {"proto", p.proto},   {"address", p.dst.to_string()},
                       {"decision", "deny"},  {"rule", kNflogRule}, {"reason", kNflogReason}};
  if (p.port) {
    ev["port"] = *p.port;
  }
  if (p.icmp_type) {
    ev["icmp_type"] = *p.icmp_type;
  }
  if (p.proto == "other") {
    ev["protocol"] = p.protocol;
  }
  if (!name.empty()) {
    ev["name"] = name;
  }
  if (!p.prefix.empty() && p.prefix != "cordon-drop") {
    ev["log_prefix"] = p.prefix;  // a rule other than ours logged to the group
  }
  return ev;
}

nlohmann::json drop_summary_event(const DropSummary& s, uint32_t per_second) {
  nlohmann::json ev = {{"mode", "netfilter"},
                       {"decision", "deny"},
                       {"rule", kNflogRule},
                       {"reason", kNflogReason},
                       {"summary", true},
                       {"count", s.suppressed},
                       {"protos", s.protos},
                       {"destinations", s.destinations},
                       {"note", "more than " + std::to_string(per_second) +
                                    " dropped packets in a second: the rest are counted here"}};
  if (s.unreadable > 0) {
    ev["unreadable"] = s.unreadable;
  }
  if (s.overruns > 0) {
    // ENOBUFS: the kernel could not queue some log messages; their packets were still dropped.
    ev["overruns"] = s.overruns;
  }
  return ev;
}

}  // namespace cordon::netproxy
