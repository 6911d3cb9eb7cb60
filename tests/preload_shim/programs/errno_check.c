/* Prints, for each hooked call, its result and the errno it left behind (seeded with a sentinel
 * first). Output must be byte-identical with and without the shim: hooks preserve errno. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;
#define SENTINEL 4242
#define REPORT(name, ok) printf("%-22s ok=%d errno=%d\n", name, (ok) ? 1 : 0, errno)

int main(void) {
  struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd;

  errno = SENTINEL;
  fd = open("/dev/null", O_RDONLY);
  REPORT("open ok", fd >= 0);
  close(fd);
  errno = SENTINEL;
  fd = open("/nonexistent/x", O_RDONLY);
  REPORT("open enoent", fd >= 0);
  errno = SENTINEL;
  fd = openat(AT_FDCWD, "/dev/null", O_RDONLY);
  REPORT("openat ok", fd >= 0);
  close(fd);
  errno = SENTINEL;
  fd = creat("/proc/nope", 0600);
  REPORT("creat fails", fd >= 0);
  errno = SENTINEL;
  FILE* f = fopen("/nonexistent/y", "r");
  REPORT("fopen enoent", f != NULL);

  int l = socket(AF_INET, SOCK_STREAM, 0);
  errno = SENTINEL;
  int rc = bind(l, (struct sockaddr*)&lo, sizeof lo);
  REPORT("bind ok", rc == 0);
  errno = SENTINEL;
  rc = listen(l, 4);
  REPORT("listen ok", rc == 0);
  struct sockaddr_in bound;
  socklen_t bl = sizeof bound;
  getsockname(l, (struct sockaddr*)&bound, &bl);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  errno = SENTINEL;
  rc = connect(c, (struct sockaddr*)&bound, sizeof bound);
  REPORT("connect ok", rc == 0);
  close(c);
  c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  errno = SENTINEL;
  rc = connect(c, (struct sockaddr*)&bound, sizeof bound);
  REPORT("connect nonblock", rc == 0 || errno == EINPROGRESS);
  close(c);
  close(l);
  struct sockaddr_in closed = lo;
  closed.sin_port = htons(1);
  c = socket(AF_INET, SOCK_STREAM, 0);
  errno = SENTINEL;
  rc = connect(c, (struct sockaddr*)&closed, sizeof closed);
  REPORT("connect refused", rc == 0);
  close(c);
  int u = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in discard = lo;
  discard.sin_port = htons(9);
  errno = SENTINEL;
  ssize_t n = sendto(u, "x", 1, 0, (struct sockaddr*)&discard, sizeof discard);
  REPORT("sendto ok", n == 1);
  errno = SENTINEL;
  n = sendto(u, "x", 1, 0, (struct sockaddr*)&discard, 3);
  REPORT("sendto einval", n == 1);
  close(u);
  struct addrinfo* res = NULL;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  errno = SENTINEL;
  rc = getaddrinfo("localhost", "80", &hints, &res);
  REPORT("getaddrinfo ok", rc == 0);
  if (res) freeaddrinfo(res);
  pid_t pid;
  char* argv[] = {"true", NULL};
  errno = SENTINEL;
  rc = posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ);
  REPORT("posix_spawn ok", rc == 0);
  int st;
  waitpid(pid, &st, 0);
  errno = SENTINEL;
  rc = execve("/nonexistent/prog", argv, environ);
  REPORT("execve enoent", rc == 0);
  errno = SENTINEL;
  rc = execvp("no-such-program-cordon", argv);
  REPORT("execvp enoent", rc == 0);
  return 0;
}
