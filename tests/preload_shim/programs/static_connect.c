/* Built with -static: the shim cannot be loaded into it. Connects UDP and opens a file. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

int main(void) {
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = connect(s, (struct sockaddr*)&a, sizeof a);
  close(s);
  int fd = open("/dev/null", O_RDONLY);
  printf("static: connect=%d open=%s\n", rc, fd >= 0 ? "ok" : "failed");
  return 0;
}
