// bench/proxy/sockmap_relay.c: an in-kernel TCP relay, as the yardstick for what cordon-netproxy's
// data path could reach if bytes never went through user space: accept on loopback, connect to
// one fixed upstream, put both sockets into a BPF sockmap whose SK_SKB stream-verdict program
// redirects every skb to the peer socket's send side (bpf_sk_redirect_map, flags 0). User space
// only sets connections up and passes FINs on. No policy, no events; root only (BPF). Measured by
// bench/proxy/sockmap_ab.sh (and run.sh, next to relay_ceiling.c):
//
//   sockmap_relay [-n NETNS_FILE] [-w BYTES] [-s BYTES] [-r BYTES] [-N] [-d MS] LISTEN_PORT
//                 UPSTREAM_IP UPSTREAM_PORT
//
// Listens on 127.0.0.1:LISTEN_PORT (0 = any free port) — inside the network namespace NETNS_FILE
// when given (the client in a namespace, the upstream dialled from ours, as the transparent path)
// — prints "127.0.0.1:PORT" once listening and relays until SIGINT/SIGTERM. -w sets
// TCP_NOTSENT_LOWAT on both sockets (default 0: unset), -s the client socket's SO_SNDBUF, -r the
// upstream socket's SO_RCVBUF (default 0: autotuned), -N leaves TCP_NODELAY off (default on, as
// relay_ceiling), -d waits MS milliseconds between connect and joining the map (a test knob: the
// request head is then already queued). Prints each connection's kernel-relayed byte counts to
// stderr when it closes.
//
// No libbpf: the verdict program is assembled here from <linux/bpf.h> and loaded with bpf(2).
// It maps the skb's socket (bpf_get_socket_cookie) to its peer's sockmap key through a hash map
// {cookie -> peer key, bytes redirected}, counts the bytes, and redirects:
//   if (skb->len == 0) return SK_DROP;
//   cookie = get_socket_cookie(skb); v = lookup(peers, &cookie); if (!v) return SK_PASS;
//   v->bytes += skb->len (atomic); return sk_redirect_map(skb, socks, v->peer, 0);
// Client of slot i is key 2i, its upstream 2i+1. The empty skb is a FIN's (tcp_read_skb hands it
// to the verdict too): redirected, the peer's psock backlog sends 0 bytes, takes that for an error
// and sets EPIPE on the peer socket, cutting the other direction; TCP has already recorded the FIN
// (RCV_SHUTDOWN, what poll reports), so dropping the empty skb loses nothing.
//
// Bytes that arrived before a socket joined the map (the client's request head, usually) wait in
// its receive queue; the verdict only runs on the next data_ready. setsockopt(SO_RCVLOWAT) makes
// TCP re-check the queue and call data_ready (tcp_set_rcvlowat), so right after joining, each
// socket is kicked once and the queued bytes go through the program in order, before any later
// ones: no user-space copy of the head is needed and the byte stream stays in order. The upstream
// joins first: a client byte is never redirected to a socket not yet in the map (a server that
// speaks before the client could lose bytes sent in the microseconds between the two joins; HTTP
// does not).
//
// A FIN from one side is passed on (shutdown(peer, SHUT_WR)) only once the peer has taken every
// byte the program redirected to it: the redirect queues skbs to the peer's psock, a kworker
// sends them, so the FIN can overtake them. "Taken" = the peer's bytes_acked + SIOCOUTQ since it
// joined, and the FIN's own socket must have nothing left unread (SIOCINQ 0): poll can report the
// FIN before the program has seen the data queued with it. The check repeats every millisecond,
// for at most 10 s.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/sockios.h>
#include <linux/tcp.h>  // struct tcp_info with tcpi_bytes_acked (glibc's lacks it)
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "relay_common.h"

enum { kMaxConns = 256, kDrainMs = 10000 };

// Hand-assembled BPF instructions.
#define INSN(c, d, s, o, i) \
  { .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) }
#define MOV64_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD64_IMM(d, i) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define LDX_MEM(sz, d, s, o) INSN(BPF_LDX | (sz) | BPF_MEM, d, s, o, 0)
#define STX_MEM(sz, d, s, o) INSN(BPF_STX | (sz) | BPF_MEM, d, s, o, 0)
#define ATOMIC_ADD(sz, d, s, o) INSN(BPF_STX | (sz) | BPF_ATOMIC, d, s, o, BPF_ADD)
#define LD_MAP_FD(d, fd) \
  INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd), INSN(0, 0, 0, 0, 0)
#define JEQ_IMM(d, i, o) INSN(BPF_JMP | BPF_JEQ | BPF_K, d, 0, o, i)
#define CALL(f) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

// The hash map's value, per socket.
struct peer {
  uint32_t key;  // the peer's sockmap key
  uint32_t pad;
  uint64_t bytes;  // bytes this socket received and the program redirected to the peer
};

struct side {
  int fd;
  uint64_t cookie;
  uint64_t base;     // bytes_acked + SIOCOUTQ when it joined the map
  int rd_eof;        // FIN received
  long long eof_ms;  // when
  int fin_sent;      // ... and passed on to the other side
};

struct conn {
  int used;
  struct side s[2];  // client, upstream
};

static struct conn conns[kMaxConns];
static int notsent_lowat, sndbuf, rcvbuf, nodelay = 1, delay_ms;
static int sock_map, peer_map;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static long sys_bpf(int cmd, union bpf_attr* attr) {
  return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

static int map_create(uint32_t type, uint32_t key_size, uint32_t value_size, uint32_t n) {
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.map_type = type;
  a.key_size = key_size;
  a.value_size = value_size;
  a.max_entries = n;
  return (int)sys_bpf(BPF_MAP_CREATE, &a);
}

static int map_update(int map, const void* key, const void* value, uint64_t flags) {
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.map_fd = (uint32_t)map;
  a.key = (uint64_t)(uintptr_t)key;
  a.value = (uint64_t)(uintptr_t)value;
  a.flags = flags;
  return (int)sys_bpf(BPF_MAP_UPDATE_ELEM, &a);
}

static int map_lookup(int map, const void* key, void* value) {
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.map_fd = (uint32_t)map;
  a.key = (uint64_t)(uintptr_t)key;
  a.value = (uint64_t)(uintptr_t)value;
  return (int)sys_bpf(BPF_MAP_LOOKUP_ELEM, &a);
}

static void map_delete(int map, const void* key) {
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.map_fd = (uint32_t)map;
  a.key = (uint64_t)(uintptr_t)key;
  sys_bpf(BPF_MAP_DELETE_ELEM, &a);
}

// Creates the maps, loads the verdict program and attaches it to the sockmap. Exits with the
// verifier's log if the kernel refuses.
static void setup_bpf(void) {
  sock_map = map_create(BPF_MAP_TYPE_SOCKMAP, 4, 4, 2 * kMaxConns);
  if (sock_map < 0) die("bpf(BPF_MAP_CREATE, SOCKMAP) (root and CONFIG_BPF_STREAM_PARSER needed)");
  peer_map = map_create(BPF_MAP_TYPE_HASH, 8, sizeof(struct peer), 2 * kMaxConns);
  if (peer_map < 0) die("bpf(BPF_MAP_CREATE, HASH)");
  struct bpf_insn prog[] = {
      MOV64_REG(BPF_REG_6, BPF_REG_1),  // r6 = skb
      LDX_MEM(BPF_W, BPF_REG_8, BPF_REG_6, offsetof(struct __sk_buff, len)),
      JEQ_IMM(BPF_REG_8, 0, 19),                   // a bare FIN: goto drop
      CALL(BPF_FUNC_get_socket_cookie),            // r0 = cookie(skb->sk)
      STX_MEM(BPF_DW, BPF_REG_10, BPF_REG_0, -8),  // stack[-8] = cookie
      LD_MAP_FD(BPF_REG_1, peer_map),              // r1 = peers
      MOV64_REG(BPF_REG_2, BPF_REG_10),
      ADD64_IMM(BPF_REG_2, -8),        // r2 = &cookie
      CALL(BPF_FUNC_map_lookup_elem),  // r0 = &peers[cookie]
      JEQ_IMM(BPF_REG_0, 0, 9),        // not ours: goto pass
      LDX_MEM(BPF_W, BPF_REG_7, BPF_REG_0, offsetof(struct peer, key)),
      ATOMIC_ADD(BPF_DW, BPF_REG_0, BPF_REG_8, offsetof(struct peer, bytes)),
      MOV64_REG(BPF_REG_1, BPF_REG_6),  // r1 = skb
      LD_MAP_FD(BPF_REG_2, sock_map),   // r2 = socks
      MOV64_REG(BPF_REG_3, BPF_REG_7),  // r3 = peer key
      MOV64_IMM(BPF_REG_4, 0),          // r4 = flags: egress
      CALL(BPF_FUNC_sk_redirect_map),
      EXIT(),
      MOV64_IMM(BPF_REG_0, SK_PASS),  // pass:
      EXIT(),
      MOV64_IMM(BPF_REG_0, SK_DROP),  // drop:
      EXIT(),
  };
  static char log[65536];
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.prog_type = BPF_PROG_TYPE_SK_SKB;
  a.insns = (uint64_t)(uintptr_t)prog;
  a.insn_cnt = sizeof prog / sizeof prog[0];
  a.license = (uint64_t)(uintptr_t) "GPL";
  a.log_buf = (uint64_t)(uintptr_t)log;
  a.log_size = sizeof log;
  a.log_level = 1;
  int fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
  if (fd < 0) {
    fprintf(stderr, "sockmap_relay: bpf(BPF_PROG_LOAD): %s; verifier log:\n%s\n", strerror(errno),
            log);
    exit(1);
  }
  memset(&a, 0, sizeof a);
  a.target_fd = (uint32_t)sock_map;
  a.attach_bpf_fd = (uint32_t)fd;
  a.attach_type = BPF_SK_SKB_STREAM_VERDICT;
  if (sys_bpf(BPF_PROG_ATTACH, &a) != 0) die("bpf(BPF_PROG_ATTACH, SK_SKB_STREAM_VERDICT)");
  close(fd);  // the map holds the program now
}

// Bytes the socket has been given to send so far (acknowledged + still queued).
static uint64_t sent_total(int fd) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  int outq = 0;
  memset(&ti, 0, sizeof ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ioctl(fd, SIOCOUTQ, &outq) != 0) {
    return 0;
  }
  return ti.tcpi_bytes_acked + (uint64_t)outq;
}

static uint64_t redirected(const struct side* s) {
  struct peer p;
  return map_lookup(peer_map, &s->cookie, &p) == 0 ? p.bytes : 0;
}

static void close_conn(struct conn* c, int idx) {
  uint64_t up = redirected(&c->s[0]), down = redirected(&c->s[1]);
  fprintf(stderr,
          "sockmap_relay: conn %d closed: client->upstream %llu bytes in kernel, "
          "upstream->client %llu\n",
          idx, (unsigned long long)up, (unsigned long long)down);
  for (int i = 0; i < 2; i++) {
    map_delete(peer_map, &c->s[i].cookie);
    close(c->s[i].fd);  // leaves the sockmap by itself
  }
  c->used = 0;
}

// -s and -r size the bulk direction of a download: the client socket's send buffer and the
// upstream socket's receive buffer (the *FORCE options: root may pass net.core.[wr]mem_max).
static void tune(int fd, int client) {
  if (nodelay) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
  if (notsent_lowat > 0) {
    setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &notsent_lowat, sizeof notsent_lowat);
  }
  if (client && sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf);
  if (!client && rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
}

static void accept_one(int lfd) {
  int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  if (cfd < 0) return;
  int idx = -1;
  for (int i = 0; i < kMaxConns; i++) {
    if (!conns[i].used) {
      idx = i;
      break;
    }
  }
  int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // A blocking connect on loopback: immediate, and keeps this program short.
  if (idx < 0 || ufd < 0 || connect(ufd, (struct sockaddr*)&upstream, sizeof upstream) != 0) {
    fprintf(stderr, "sockmap_relay: %s\n", idx < 0 ? "too many connections" : strerror(errno));
    close(cfd);
    if (ufd >= 0) close(ufd);
    return;
  }
  tune(cfd, 1);
  tune(ufd, 0);
  if (delay_ms > 0) {
    struct timespec ts = {.tv_sec = delay_ms / 1000, .tv_nsec = (delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  struct conn* c = &conns[idx];
  memset(c, 0, sizeof *c);
  c->s[0].fd = cfd;
  c->s[1].fd = ufd;
  for (int i = 0; i < 2; i++) {
    socklen_t len = sizeof c->s[i].cookie;
    struct peer p = {.key = (uint32_t)(2 * idx + 1 - i)};
    if (getsockopt(c->s[i].fd, SOL_SOCKET, SO_COOKIE, &c->s[i].cookie, &len) != 0 ||
        map_update(peer_map, &c->s[i].cookie, &p, BPF_ANY) != 0) {
      fprintf(stderr, "sockmap_relay: SO_COOKIE / bpf(BPF_MAP_UPDATE_ELEM, hash): %s\n",
              strerror(errno));
      goto fail;
    }
    c->s[i].base = sent_total(c->s[i].fd);
  }
  // Upstream first (see the top comment), then the client; then kick both queues.
  for (int i = 1; i >= 0; i--) {
    uint32_t key = (uint32_t)(2 * idx + i), fd = (uint32_t)c->s[i].fd;
    if (map_update(sock_map, &key, &fd, BPF_ANY) != 0) {
      fprintf(stderr, "sockmap_relay: bpf(BPF_MAP_UPDATE_ELEM, sockmap): %s\n", strerror(errno));
      goto fail;
    }
  }
  for (int i = 0; i < 2; i++) {
    int one = 1;
    setsockopt(c->s[i].fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    fcntl(c->s[i].fd, F_SETFL, O_NONBLOCK);
  }
  c->used = 1;
  return;
fail:
  for (int i = 0; i < 2; i++) map_delete(peer_map, &c->s[i].cookie);
  close(cfd);
  close(ufd);
}

// Passes on a FIN received by side i once the other side has taken every redirected byte.
// Returns 1 while still waiting.
static int pass_fin(struct conn* c, int i) {
  struct side* from = &c->s[i];
  struct side* to = &c->s[1 - i];
  if (!from->rd_eof || from->fin_sent) return 0;
  int inq = 0;  // bytes the program has not seen yet (RDHUP shows before the last data's verdict)
  if (ioctl(from->fd, SIOCINQ, &inq) != 0 || inq > 0 ||
      sent_total(to->fd) - to->base < redirected(from)) {
    if (now_ms() - from->eof_ms < kDrainMs) return 1;
    fprintf(stderr, "sockmap_relay: %d ms after a FIN, bytes still not drained; passing it on\n",
            kDrainMs);
  }
  shutdown(to->fd, SHUT_WR);
  from->fin_sent = 1;
  return 0;
}

int main(int argc, char** argv) {
  relay_name = "sockmap_relay";
  const char* netns = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "n:w:s:r:Nd:")) != -1) {
    switch (opt) {
      case 'n':
        netns = optarg;
        break;
      case 'w':
        notsent_lowat = atoi(optarg);
        break;
      case 's':
        sndbuf = atoi(optarg);
        break;
      case 'r':
        rcvbuf = atoi(optarg);
        break;
      case 'N':
        nodelay = 0;
        break;
      case 'd':
        delay_ms = atoi(optarg);
        break;
      default:
        goto usage;
    }
  }
  if (argc - optind != 3) {
  usage:
    fprintf(stderr,
            "usage: %s [-n NETNS_FILE] [-w BYTES] [-s BYTES] [-r BYTES] [-N] [-d MS] "
            "LISTEN_PORT UPSTREAM_IP UPSTREAM_PORT\n",
            argv[0]);
    return 2;
  }
  if (parse_upstream(argv[optind + 1], argv[optind + 2]) != 0) {
    return 2;
  }
  setup_bpf();

  int lfd = listen_and_announce(netns, argv[optind]);

  static struct pollfd pfd[1 + 2 * kMaxConns];
  static int owner[1 + 2 * kMaxConns];
  int waiting = 0;  // some FIN waits for its direction to drain
  while (!stop) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int i = 0; i < kMaxConns; i++) {
      if (!conns[i].used) continue;
      for (int s = 0; s < 2; s++) {
        // Data never wakes us (the program takes it in softirq); only a FIN or an error does.
        owner[n] = i;
        pfd[n++] =
            (struct pollfd){.fd = conns[i].s[s].fd, .events = conns[i].s[s].rd_eof ? 0 : POLLRDHUP};
      }
    }
    if (poll(pfd, (nfds_t)n, waiting ? 1 : -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (pfd[0].revents & POLLIN) accept_one(lfd);
    waiting = 0;
    for (int k = 1; k < n; k += 2) {
      struct conn* c = &conns[owner[k]];
      if (!c->used) continue;
      if ((pfd[k].revents | pfd[k + 1].revents) & (POLLERR | POLLNVAL)) {
        int err[2] = {0, 0};
        for (int s = 0; s < 2; s++) {
          socklen_t el = sizeof err[s];
          getsockopt(c->s[s].fd, SOL_SOCKET, SO_ERROR, &err[s], &el);
        }
        fprintf(stderr, "sockmap_relay: conn %d: socket error: client %s, upstream %s\n", owner[k],
                strerror(err[0]), strerror(err[1]));
        close_conn(c, owner[k]);
        continue;
      }
      for (int s = 0; s < 2; s++) {
        if ((pfd[k + s].revents & POLLRDHUP) && !c->s[s].rd_eof) {
          c->s[s].rd_eof = 1;
          c->s[s].eof_ms = now_ms();
        }
      }
      int w = pass_fin(c, 0) | pass_fin(c, 1);
      if (c->s[0].fin_sent && c->s[1].fin_sent) {
        close_conn(c, owner[k]);
      } else {
        waiting |= w;
      }
    }
  }
  for (int i = 0; i < kMaxConns; i++) {
    if (conns[i].used) close_conn(&conns[i], i);
  }
  close(lfd);
  close(sock_map);
  close(peer_map);
  return 0;
}
