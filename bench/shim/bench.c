/* Shim micro-benchmark: `bench open N` times N open+close pairs on a tmpfs file; `bench connect N`
 * times N loopback TCP connects (socket, connect, accept, close both) against an in-process
 * listener. Prints "<what> <N> <wall ns per op> <cpu ns per op>". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* CPU time (user+sys) of this process: on a shared, overloaded machine wall time mostly measures
 * how often the process was preempted; CPU time measures the work each call costs. */
static double cpu_ns(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
}

static int bench_open(long n, const char* path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return perror("create"), 1;
  close(fd);
  double t0 = now_ns(), c0 = cpu_ns();
  for (long i = 0; i < n; ++i) {
    fd = open(path, O_RDONLY);
    if (fd < 0) return perror("open"), 1;
    close(fd);
  }
  double t1 = now_ns(), c1 = cpu_ns();
  unlink(path);
  printf("open %ld %.1f %.1f\n", n, (t1 - t0) / n, (c1 - c0) / n);
  return 0;
}

static int bench_connect(long n) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(lfd, (struct sockaddr*)&a, sizeof a) != 0 || listen(lfd, 128) != 0)
    return perror("listen"), 1;
  getsockname(lfd, (struct sockaddr*)&a, &len);
  /* RST on close: no TIME_WAIT, so 100k connects do not exhaust the ephemeral ports. */
  struct linger lg = {1, 0};
  double t0 = now_ns(), c0 = cpu_ns();
  for (long i = 0; i < n; ++i) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(c, (struct sockaddr*)&a, sizeof a) != 0) return perror("connect"), 1;
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) return perror("accept"), 1;
    setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(c);
    close(s);
  }
  double t1 = now_ns(), c1 = cpu_ns();
  printf("connect %ld %.1f %.1f\n", n, (t1 - t0) / n, (c1 - c0) / n);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s open|connect N [path]\n", argv[0]);
    return 2;
  }
  long n = atol(argv[2]);
  if (strcmp(argv[1], "open") == 0)
    return bench_open(n, argc > 3 ? argv[3] : "/dev/shm/cordon-bench-open");
  if (strcmp(argv[1], "connect") == 0) return bench_connect(n);
  return 2;
}
