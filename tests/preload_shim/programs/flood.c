/* Floods the shim: N UDP connects and N opens (every one an event with CORDON_SHIM_FS_EVENTS=all),
 * writes MARKER.phase1, waits (bounded) for MARKER.go, makes one more connect and exits. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void udp_connect(int port) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(s, (struct sockaddr*)&a, sizeof a);
  close(s);
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  long n = atol(argv[1]);
  char path[4096];
  for (long i = 0; i < n; ++i) {
    udp_connect(9);
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) close(fd);
  }
  snprintf(path, sizeof path, "%s.phase1", argv[2]);
  int m = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (m >= 0) close(m);
  snprintf(path, sizeof path, "%s.go", argv[2]);
  for (int i = 0; i < 60000 && access(path, F_OK) != 0; ++i) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  udp_connect(4242);
  printf("done n=%ld\n", n);
  return 0;
}
