/* A program that closes every fd (as daemons do), then fills every descriptor number with one end
 * of a stream socketpair, keeps making calls the shim reports, and checks that nothing was written
 * into its socket: the shim must notice its event fd is gone and never write to the program's. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static int udp_connect(int port) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int rc = connect(s, (struct sockaddr*)&a, sizeof a);
  close(s);
  return rc;
}

int main(void) {
  udp_connect(7001); /* the shim opens its event socket now */
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  int top = rl.rlim_cur > 1100 ? 1100 : (int)rl.rlim_cur;
  for (int fd = 3; fd < top; ++fd) close(fd);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  /* Every free number up to `top`-16 now refers to the program's own stream socket. */
  int filled = 0;
  for (int fd = 5; fd < top - 16; ++fd) {
    if (dup2(sv[0], fd) == fd) ++filled;
  }
  int opened = 0;
  for (int i = 0; i < 100; ++i) {
    int f = open("/dev/null", O_RDONLY);
    if (f >= 0) {
      ++opened;
      close(f);
    }
    udp_connect(7002);
  }
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  char buf[4096];
  ssize_t n = read(sv[1], buf, sizeof buf);
  long leaked = n > 0 ? n : 0;
  printf("filled=%s opened=%d leaked=%ld\n", filled > 500 ? "many" : "few", opened, leaked);
  return leaked == 0 ? 0 : 3;
}
