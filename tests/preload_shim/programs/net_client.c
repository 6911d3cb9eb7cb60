/* net_client IP PORT TIMES: connects TIMES times (TCP) and prints each result. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t len;
  struct sockaddr_in* in = (struct sockaddr_in*)&ss;
  struct sockaddr_in6* in6 = (struct sockaddr_in6*)&ss;
  if (inet_pton(AF_INET, argv[1], &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons((unsigned short)atoi(argv[2]));
    len = sizeof *in;
  } else if (inet_pton(AF_INET6, argv[1], &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((unsigned short)atoi(argv[2]));
    len = sizeof *in6;
  } else {
    return 2;
  }
  int times = atoi(argv[3]);
  for (int i = 0; i < times; ++i) {
    int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(s, (struct sockaddr*)&ss, len) == 0) {
      printf("connect: ok\n");
    } else {
      printf("connect: errno=%d (%s)\n", errno, strerror(errno));
    }
    close(s);
  }
  return 0;
}
