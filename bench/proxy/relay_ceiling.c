// bench/proxy/relay_ceiling.c: the least a user-space TCP relay can do, as a yardstick for
// cordon-netproxy's data path: accept on loopback, connect to one fixed upstream, move bytes both
// ways socket -> pipe -> socket with splice(2) under poll(2), pass a FIN on as a half-close. No
// policy, no events, no accounting. Built and run by bench/proxy/run.sh and bulk_ab.sh:
//
//   relay_ceiling [-n NETNS_FILE] [-p PIPE_BYTES] [-c CHUNK_BYTES] [-e] [-w BYTES] LISTEN_PORT
//                 UPSTREAM_IP UPSTREAM_PORT
//
// Listens on 127.0.0.1:LISTEN_PORT (0 = any free port) — inside the network namespace
// NETNS_FILE when given (like the transparent path: the client in a namespace, the upstream
// dialled from ours) — prints "127.0.0.1:PORT" once listening and relays until SIGINT/SIGTERM.
// Pipes are PIPE_BYTES (default 1 MiB, capped by /proc/sys/fs/pipe-max-size), each splice asks
// for up to CHUNK_BYTES. By default a direction reads only into an empty pipe, so that while the
// writing side is full the bytes wait in the socket and the next read takes them in one go; -e
// reads into whatever room the pipe has (and so also wakes for bytes arriving while the writing
// side is full). -w sets
// TCP_NOTSENT_LOWAT on both sockets (default 131072, as cordon's pump; 0 leaves it unset).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "relay_common.h"

enum { kMaxConns = 512 };

// One direction: bytes from `from` wait in the pipe until `to` takes them.
struct dir {
  int from, to;
  int pr, pw;    // the pipe
  size_t held;   // bytes in the pipe
  int read_eof;  // `from` sent FIN
  int done;      // FIN passed on
};

struct conn {
  int used;
  int fd[2];        // client, upstream
  struct dir d[2];  // 0: client -> upstream, 1: upstream -> client
};

static struct conn conns[kMaxConns];
static size_t pipe_bytes = 1 << 20;
static size_t chunk = 1 << 20;
static int eager;  // -e: read into a pipe that still holds bytes (else only into an empty one)
// -w BYTES: TCP_NOTSENT_LOWAT on both sockets (0: not set). 128 KiB, as cordon's pump: +12 % on
// the 1 GiB bulk row here (bulk_ab.sh, RELAY_OPTS "" vs "-w 131072": 1797/1784 -> 2010/2017 MiB/s).
static int notsent_lowat = 128 * 1024;

static void close_conn(struct conn* c) {
  for (int i = 0; i < 2; i++) {
    close(c->fd[i]);
    close(c->d[i].pr);
    close(c->d[i].pw);
  }
  c->used = 0;
}

// Moves what it can without blocking. Returns -1 on a hard error (the connection is dropped).
static int pump(struct dir* d) {
  for (;;) {
    int progress = 0;
    if (!d->read_eof && d->held < pipe_bytes && (eager || d->held == 0)) {
      ssize_t n = splice(d->from, NULL, d->pw, NULL, chunk, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        d->held += (size_t)n;
        progress = 1;
      } else if (n == 0) {
        d->read_eof = 1;
      } else if (errno != EAGAIN && errno != EINTR) {
        return -1;
      }
    }
    if (d->held > 0) {
      ssize_t n = splice(d->pr, NULL, d->to, NULL, d->held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        d->held -= (size_t)n;
        progress = 1;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        return -1;
      }
    }
    if (d->read_eof && d->held == 0 && !d->done) {
      shutdown(d->to, SHUT_WR);
      d->done = 1;
    }
    if (!progress) {
      return 0;
    }
  }
}

static int make_pipe(struct dir* d) {
  int p[2];
  if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
    return -1;
  }
  d->pr = p[0];
  d->pw = p[1];
  // The kernel caps this at /proc/sys/fs/pipe-max-size; keep what it gives.
  int got = fcntl(d->pw, F_SETPIPE_SZ, (int)pipe_bytes);
  if (got > 0 && (size_t)got < pipe_bytes) {
    pipe_bytes = (size_t)got;
  }
  return 0;
}

static void accept_one(int lfd) {
  int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (cfd < 0) {
    return;
  }
  struct conn* c = NULL;
  for (int i = 0; i < kMaxConns; i++) {
    if (!conns[i].used) {
      c = &conns[i];
      break;
    }
  }
  int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // A blocking connect on loopback: immediate, and keeps this program short.
  if (c == NULL || ufd < 0 || connect(ufd, (struct sockaddr*)&upstream, sizeof upstream) != 0) {
    close(cfd);
    if (ufd >= 0) {
      close(ufd);
    }
    return;
  }
  fcntl(ufd, F_SETFL, O_NONBLOCK);
  int one = 1;
  setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (notsent_lowat > 0) {
    setsockopt(cfd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &notsent_lowat, sizeof notsent_lowat);
    setsockopt(ufd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &notsent_lowat, sizeof notsent_lowat);
  }
  memset(c, 0, sizeof *c);
  c->fd[0] = cfd;
  c->fd[1] = ufd;
  c->d[0] = (struct dir){.from = cfd, .to = ufd, .pr = -1, .pw = -1};
  c->d[1] = (struct dir){.from = ufd, .to = cfd, .pr = -1, .pw = -1};
  if (make_pipe(&c->d[0]) != 0 || make_pipe(&c->d[1]) != 0) {
    for (int i = 0; i < 2; i++) {
      if (c->d[i].pr >= 0) {
        close(c->d[i].pr);
        close(c->d[i].pw);
      }
    }
    close(cfd);
    close(ufd);
    return;
  }
  c->used = 1;
}

int main(int argc, char** argv) {
  relay_name = "relay_ceiling";
  const char* netns = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "n:p:c:ew:")) != -1) {
    switch (opt) {
      case 'n':
        netns = optarg;
        break;
      case 'p':
        pipe_bytes = strtoul(optarg, NULL, 0);
        break;
      case 'c':
        chunk = strtoul(optarg, NULL, 0);
        break;
      case 'e':
        eager = 1;
        break;
      case 'w':
        notsent_lowat = atoi(optarg);
        break;
      default:
        goto usage;
    }
  }
  if (argc - optind != 3 || pipe_bytes == 0 || chunk == 0) {
  usage:
    fprintf(stderr,
            "usage: %s [-n NETNS_FILE] [-p PIPE_BYTES] [-c CHUNK_BYTES] [-e] [-w BYTES] "
            "LISTEN_PORT UPSTREAM_IP UPSTREAM_PORT\n",
            argv[0]);
    return 2;
  }
  if (parse_upstream(argv[optind + 1], argv[optind + 2]) != 0) {
    return 2;
  }

  int lfd = listen_and_announce(netns, argv[optind]);

  static struct pollfd pfd[1 + 2 * kMaxConns];
  static int owner[1 + 2 * kMaxConns];
  while (!stop) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int i = 0; i < kMaxConns; i++) {
      struct conn* c = &conns[i];
      if (!c->used) {
        continue;
      }
      for (int s = 0; s < 2; s++) {
        // Socket s is `from` of direction s and `to` of direction 1 - s.
        short ev = 0;
        if (!c->d[s].read_eof && c->d[s].held < pipe_bytes && (eager || c->d[s].held == 0)) {
          ev |= POLLIN;
        }
        if (c->d[1 - s].held > 0) {
          ev |= POLLOUT;
        }
        owner[n] = i;
        pfd[n++] = (struct pollfd){.fd = c->fd[s], .events = ev};
      }
    }
    if (poll(pfd, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      die("poll");
    }
    if (pfd[0].revents & POLLIN) {
      accept_one(lfd);
    }
    for (int k = 1; k < n; k += 2) {
      if (!(pfd[k].revents | pfd[k + 1].revents)) {
        continue;
      }
      struct conn* c = &conns[owner[k]];
      // A reset socket: nothing more can move either way.
      if ((pfd[k].revents | pfd[k + 1].revents) & (POLLERR | POLLNVAL)) {
        close_conn(c);
        continue;
      }
      if (pump(&c->d[0]) != 0 || pump(&c->d[1]) != 0 || (c->d[0].done && c->d[1].done)) {
        close_conn(c);
      }
    }
  }
  for (int i = 0; i < kMaxConns; i++) {
    if (conns[i].used) {
      close_conn(&conns[i]);
    }
  }
  close(lfd);
  return 0;
}
