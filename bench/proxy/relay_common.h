// bench/proxy/relay_common.h: what the two bare relays of the benchmark (relay_ceiling.c and
// sockmap_relay.c) share, so that they differ only in how bytes move: errors named after the
// program, the stop flag their loops watch, the upstream address from the command line, and the
// loopback listener, made inside a network namespace file when one is given (as the transparent
// path's is) while upstream sockets are dialled from ours.
#pragma once
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char* relay_name = "relay";
static volatile sig_atomic_t stop;
static struct sockaddr_in upstream;

static void die(const char* what) {
  fprintf(stderr, "%s: %s: %s\n", relay_name, what, strerror(errno));
  exit(1);
}

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

// UPSTREAM_IP UPSTREAM_PORT into `upstream`: 0, or 2 (the usage exit code) after saying why.
static int parse_upstream(const char* ip, const char* port) {
  upstream.sin_family = AF_INET;
  upstream.sin_port = htons((uint16_t)atoi(port));
  if (inet_pton(AF_INET, ip, &upstream.sin_addr) != 1) {
    fprintf(stderr, "%s: bad upstream address %s\n", relay_name, ip);
    return 2;
  }
  return 0;
}

// Listens on 127.0.0.1:PORT (0: any free port) inside NETNS_FILE when not NULL, makes SIGINT and
// SIGTERM set `stop` (without SA_RESTART, so poll returns EINTR), ignores SIGPIPE, prints
// "127.0.0.1:PORT" on stdout and returns the non-blocking listening socket.
static int listen_and_announce(const char* netns, const char* port) {
  int home = -1;
  if (netns != NULL) {
    home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    int ns = open(netns, O_RDONLY | O_CLOEXEC);
    if (home < 0 || ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
      die(netns);
    }
    close(ns);
  }
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof la;
  if (lfd < 0 || bind(lfd, (struct sockaddr*)&la, sizeof la) != 0 || listen(lfd, 4096) != 0 ||
      getsockname(lfd, (struct sockaddr*)&la, &len) != 0) {
    die("listen on 127.0.0.1");
  }
  if (home >= 0 && (setns(home, CLONE_NEWNET) != 0 || close(home) != 0)) {
    die("setns back");
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  printf("127.0.0.1:%d\n", ntohs(la.sin_port));
  fflush(stdout);
  return lfd;
}
