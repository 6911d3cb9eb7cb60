// The Proxy: binds or adopts the sockets and runs every accept loop on one io_context thread.
#include "netproxy/proxy.h"

#include <linux/netlink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <list>

#include "netproxy/context.h"
#include "netproxy/credentials.h"
#include "netproxy/decider.h"
#include "netproxy/dns_server.h"
#include "netproxy/frontends.h"
#include "netproxy/tls_ca.h"
#include "netproxy/wire/http_head.h"

namespace cordon::netproxy {

using udp = asio::ip::udp;

struct Proxy::Impl {
  Impl(policy::NetworkPolicy p, record::EventLog ev)
      : policy(std::move(p)), events(std::move(ev)), ctx(*io, policy, events) {}
  ~Impl() {
    signals.reset();
    explicit_acceptors.clear();
    transparent_acceptors.clear();
    dns_tcp_acceptors.clear();
    dns_udp_sockets.clear();
    nflog.reset();
    decider.reset();
    // Destroying the io_context destroys the suspended connection coroutines, whose ConnSlots
    // release into ctx.caps: that must happen while ctx is still alive.
    io.reset();
    // The proxy's last word in the record, after the events of the connections just closed.
    (void)events.report_drops();
  }
  policy::NetworkPolicy policy;
  record::EventLog events;
  std::unique_ptr<asio::io_context> io = std::make_unique<asio::io_context>(1);
  Context ctx;
  // std::list: accept loops hold references, so elements must never move.
  std::list<tcp::acceptor> explicit_acceptors;
  std::list<tcp::acceptor> transparent_acceptors;
  std::list<tcp::acceptor> dns_tcp_acceptors;
  std::list<udp::socket> dns_udp_sockets;
  std::optional<asio::posix::stream_descriptor> nflog;
  std::optional<asio::signal_set> signals;
  std::unique_ptr<CertAuthority> ca;
  SslCtxPtr upstream_tls;
  std::unique_ptr<Decider> decider;
  bool stopping = false;  // a stop (signal or stop()) has begun draining

  // Stops accepting, then waits (bounded) for the served connections to end, then stops the
  // loop. Their records (net.connect with bytes and end) are written as they end; those still
  // open when the bound is over are written as the io_context destroys them (Upstream, Tunnel),
  // with end "stopped". Idempotent.
  void begin_stop();
  asio::awaitable<void> drain_and_stop();
};

namespace {

enum class Front { Explicit, Transparent, DnsTcp };

asio::awaitable<void> serve_client(Context& ctx, tcp::socket sock, tcp::endpoint peer,
                                   Front front) {
  ClientGuard guard(ctx);
  switch (front) {
    case Front::Explicit:
      co_await serve_explicit(ctx, std::move(sock));
      break;
    case Front::Transparent:
      co_await serve_transparent(ctx, std::move(sock), peer);
      break;
    case Front::DnsTcp:
      co_await serve_dns_tcp_client(ctx, std::move(sock));
      break;
  }
}

asio::awaitable<void> accept_loop(Context& ctx, tcp::acceptor& acceptor, Front front) {
  asio::steady_timer backoff(ctx.io);
  // Heads and small answers are written apart from the bodies spliced after them: without
  // NODELAY, Nagle would hold such a write back until the client's delayed ACK. Set on the
  // listener, Linux passes it on to every accepted socket (one setsockopt, not one per
  // connection); where that fails, it is set per connection.
  boost::system::error_code nodelay_ec;
  acceptor.set_option(tcp::no_delay(true), nodelay_ec);
  const bool inherits_nodelay = !nodelay_ec;
  tcp::endpoint peer;  // filled by accept(2) itself: no getpeername per connection
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(peer, use_nothrow);
    if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
      co_return;
    }
    if (ec) {
      // EMFILE/ENFILE and friends: back off instead of spinning on a full descriptor table.
      spdlog::warn("cordon-netproxy: accept: {}", ec.message());
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(use_nothrow);
      continue;
    }
    if (ctx.clients >= Context::kMaxClients) {
      continue;  // `sock` closes here: bounded, like every other queue
    }
    boost::system::error_code ignored;
    if (!inherits_nodelay) {
      sock.set_option(tcp::no_delay(true), ignored);
    }
    // User-mode non-blocking (one ioctl, which Asio's first operation would make anyway): reads
    // and writes can then be tried at once, without a reactor round trip, where bytes or room
    // are usually there (first_flight.cc, http_proxy.cc).
    sock.non_blocking(true, ignored);
    asio::co_spawn(ctx.io, serve_client(ctx, std::move(sock), peer, front),
                   [](std::exception_ptr e) { log_coroutine_end("connection", e); });
  }
}

// Checks that `fd` is a socket of `type`, listening if TCP; returns its local address family.
Result<int> check_fd(int fd, int want_type, const char* what) {
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return sys_error(std::string("getsockopt(") + std::to_string(fd) + ", SO_TYPE) for " + what,
                     "pass an fd the launcher created and left open across exec");
  }
  if (type != want_type) {
    return make_error(std::string(what) + ": fd " + std::to_string(fd) + " is not a " +
                      (want_type == SOCK_STREAM ? "TCP" : "UDP") + " socket");
  }
  if (want_type == SOCK_STREAM) {
    int acc = 0;
    len = sizeof acc;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) != 0 || acc == 0) {
      return make_error(std::string(what) + ": fd " + std::to_string(fd) + " is not listening",
                        "call listen() on it before handing it over");
    }
  }
  sockaddr_storage ss{};
  len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return sys_error(std::string("getsockname(") + std::to_string(fd) + ") for " + what);
  }
  return static_cast<int>(ss.ss_family);
}

// An inherited NFLOG socket must be a netlink socket of the netfilter family (open_nflog_socket).
Status check_nflog_fd(int fd) {
  int domain = 0, protocol = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) {
    return sys_error("getsockopt(" + std::to_string(fd) + ", SO_DOMAIN) for --nflog-fd",
                     "pass the fd of open_nflog_socket(), left open across exec");
  }
  len = sizeof protocol;
  if (domain != AF_NETLINK || getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 ||
      protocol != NETLINK_NETFILTER) {
    return make_error("--nflog-fd: fd " + std::to_string(fd) + " is not a NETLINK_NETFILTER socket",
                      "pass the fd of netproxy::open_nflog_socket()");
  }
  return {};
}

// Adopts the inherited sockets `fds` (checked by check_fd) into `out`, one Asio object each.
template <typename Protocol, typename Socket>
Status adopt(asio::io_context& io, const std::vector<int>& fds, const char* what,
             std::list<Socket>* out) {
  constexpr int kType = std::is_same_v<Protocol, tcp> ? SOCK_STREAM : SOCK_DGRAM;
  for (int fd : fds) {
    ASSIGN_OR_RETURN(int family, check_fd(fd, kType, what));
    out->emplace_back(io, family == AF_INET6 ? Protocol::v6() : Protocol::v4(), fd);
  }
  return {};
}

}  // namespace

Proxy::Proxy(policy::NetworkPolicy policy, record::EventLog events)
    : impl_(std::make_unique<Impl>(std::move(policy), std::move(events))) {}
Proxy::~Proxy() = default;

Status Proxy::start(const ProxyOptions& opts) {
  auto& im = *impl_;
  if (!im.policy.credentials.empty() || !opts.secrets.empty()) {
    TRY(load_secrets(im.ctx, opts.secrets));  // the canaries' values ride along
  }
  im.ctx.exfil_alarm_fd = opts.exfil_alarm_fd;
  const bool ca_given =
      !opts.ca_cert_pem.empty() || !im.policy.ca_cert.empty() || !opts.ca_dir.empty();
  if (im.policy.inspect.empty() && !ca_given && !im.policy.rules.empty()) {
    // Only network.rules ask for inspection and no CA was given: their hosts' HTTPS stays a
    // tunnel the rules cannot see into, as the start-up line says.
    spdlog::warn(
        "network.rules apply to plain HTTP only: no inspection CA (--ca-dir or "
        "network.ca) was given, so HTTPS to their hosts is not inspected");
  } else if (im.policy.inspects_any()) {
    Result<std::unique_ptr<CertAuthority>> ca =
        !opts.ca_cert_pem.empty()    ? CertAuthority::from_pem(opts.ca_cert_pem, opts.ca_key_pem,
                                                               "--ca-cert-fd", "--ca-key-fd")
        : !im.policy.ca_cert.empty() ? CertAuthority::load(im.policy.ca_cert, im.policy.ca_key)
        : !opts.ca_dir.empty()
            ? CertAuthority::in_dir(opts.ca_dir)
            : Result<std::unique_ptr<CertAuthority>>(
                  make_error("network.inspect: the policy inspects TLS but no CA was given",
                             "pass --ca-cert-fd and --ca-key-fd (as cordon run does) or --ca-dir "
                             "DIR, or set network.ca {cert, key}"));
    if (!ca) {
      return std::move(ca).error();
    }
    auto client = upstream_client_ctx();
    if (!client) {
      return std::move(client).error();
    }
    im.ca = std::move(*ca);
    im.upstream_tls = std::move(*client);
    im.ctx.ca = im.ca.get();
    im.ctx.upstream_tls = im.upstream_tls.get();
  }
  for (const auto& spec : opts.listen) {
    std::string host;
    int port = -1;
    // split_host_port rejects port 0; accept "ADDR:0" (pick a free port) here.
    bool zero = spec.size() > 2 && spec.compare(spec.size() - 2, 2, ":0") == 0;
    std::string parse = zero ? spec.substr(0, spec.size() - 2) + ":1" : spec;
    if (!wire::split_host_port(parse, &host, &port) || port == 0) {
      return make_error("--listen " + spec + ": not ADDR:PORT", "e.g. 127.0.0.1:3128 or [::1]:0");
    }
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(host, ec);
    if (ec) {
      return make_error("--listen " + spec + ": \"" + host + "\" is not an IP address");
    }
    tcp::endpoint ep(addr, static_cast<uint16_t>(zero ? 0 : port));
    tcp::acceptor a(*im.io);
    a.open(ep.protocol(), ec);
    if (!ec) {
      a.set_option(tcp::acceptor::reuse_address(true), ec);
      a.bind(ep, ec);
    }
    if (!ec) {
      a.listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      errno = ec.value();
      return sys_error("bind/listen(" + spec + ") for --listen",
                       "pick a free port, or :0 to let the kernel choose");
    }
    im.explicit_acceptors.push_back(std::move(a));
  }
  TRY(adopt<tcp>(*im.io, opts.listen_fds, "--listen-fd", &im.explicit_acceptors));
  TRY(adopt<tcp>(*im.io, opts.transparent_fds, "--transparent-fd", &im.transparent_acceptors));
  TRY(adopt<tcp>(*im.io, opts.dns_tcp_fds, "--dns-tcp-fd", &im.dns_tcp_acceptors));
  TRY(adopt<udp>(*im.io, opts.dns_udp_fds, "--dns-fd", &im.dns_udp_sockets));
  if (opts.nflog_fd >= 0) {
    TRY(check_nflog_fd(opts.nflog_fd));
    im.nflog.emplace(*im.io, opts.nflog_fd);
  }
  if (opts.decider_fd >= 0) {
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(opts.decider_fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
      return make_error(
          "--decider-fd: fd " + std::to_string(opts.decider_fd) + " is not a stream socket",
          "pass one end of a socketpair(AF_UNIX, SOCK_STREAM) or a connected unix "
          "socket to the decider");
    }
    if (opts.decider_timeout.count() <= 0) {
      return make_error("--decider-timeout must be positive");
    }
    im.decider = std::make_unique<Decider>(im.ctx, opts.decider_fd, opts.decider_timeout,
                                           opts.decider_is_person, opts.sandbox_pid);
    im.ctx.decider = im.decider.get();
    im.decider->start();
  }
  if (im.explicit_acceptors.empty() && im.transparent_acceptors.empty() &&
      im.dns_udp_sockets.empty() && im.dns_tcp_acceptors.empty() && !im.nflog) {
    return make_error("nothing to serve",
                      "give --listen ADDR:PORT, --listen-fd N, --transparent-fd N, --dns-fd N, "
                      "--dns-tcp-fd N or --nflog-fd N");
  }
  auto done = [](const char* what) {
    return [what](std::exception_ptr e) { log_coroutine_end(what, e); };
  };
  for (auto& a : im.explicit_acceptors) {
    asio::co_spawn(*im.io, accept_loop(im.ctx, a, Front::Explicit), done("explicit accept loop"));
  }
  for (auto& a : im.transparent_acceptors) {
    asio::co_spawn(*im.io, accept_loop(im.ctx, a, Front::Transparent),
                   done("transparent accept loop"));
  }
  for (auto& a : im.dns_tcp_acceptors) {
    asio::co_spawn(*im.io, accept_loop(im.ctx, a, Front::DnsTcp), done("DNS/TCP accept loop"));
  }
  for (auto& s : im.dns_udp_sockets) {
    asio::co_spawn(*im.io, serve_dns_udp(im.ctx, s), done("DNS/UDP loop"));
  }
  if (im.nflog) {
    asio::co_spawn(*im.io, serve_nflog(im.ctx, *im.nflog, opts.nflog_events_per_second),
                   done("NFLOG reader"));
  }
  return {};
}

std::vector<std::string> Proxy::listening() const {
  std::vector<std::string> out;
  for (const auto& a : impl_->explicit_acceptors) {
    boost::system::error_code ec;
    auto ep = a.local_endpoint(ec);
    if (!ec) {
      auto addr = ep.address().to_string();
      out.push_back((ep.address().is_v6() ? "[" + addr + "]" : addr) + ":" +
                    std::to_string(ep.port()));
    }
  }
  return out;
}

namespace {

// How long a stop waits for the connections being served to end on their own. cordon run stops
// the proxy after the program is gone, so its sockets are closed and most connections end within
// a round trip; what is still open after this is recorded as ended by the stop. Well under the
// launcher's 2 s grace before SIGKILL.
constexpr Millis kDrainBound{250};

}  // namespace

asio::awaitable<void> Proxy::Impl::drain_and_stop() {
  boost::system::error_code ignored;
  for (auto* list : {&explicit_acceptors, &transparent_acceptors, &dns_tcp_acceptors}) {
    for (auto& a : *list) {
      a.close(ignored);
    }
  }
  asio::steady_timer tick(*io);
  const auto deadline = Clock::now() + kDrainBound;
  while (ctx.clients > 0 && Clock::now() < deadline) {
    tick.expires_after(std::chrono::milliseconds(5));
    co_await tick.async_wait(use_nothrow);
  }
  if (ctx.clients > 0) {
    spdlog::info("cordon-netproxy: {} connection(s) still open after {} ms: recorded as stopped",
                 ctx.clients, kDrainBound.count());
  }
  ctx.stopped = true;
  io->stop();
}

void Proxy::Impl::begin_stop() {
  if (stopping) {
    return;
  }
  stopping = true;
  asio::co_spawn(*io, drain_and_stop(), [](std::exception_ptr e) { log_coroutine_end("stop", e); });
}

void Proxy::run() { impl_->io->run(); }

void Proxy::stop() {
  asio::post(*impl_->io, [im = impl_.get()] { im->begin_stop(); });
}

void Proxy::handle_signals() {
  auto& im = *impl_;
  im.signals.emplace(*im.io, SIGINT, SIGTERM);
  im.signals->async_wait([im = &im](const boost::system::error_code& ec, int sig) {
    if (!ec) {
      spdlog::info("cordon-netproxy: signal {}, stopping", sig);
      im->begin_stop();
    }
  });
}

}  // namespace cordon::netproxy
