/* Signal handlers that call hooked functions: a fast interval timer whose handler opens a file and
 * connects a UDP socket, interrupting a main loop that does the same. A lock or malloc in a hook
 * path would deadlock or corrupt here. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t handled = 0;
static volatile sig_atomic_t handler_failures = 0;

static int udp_connect(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = connect(s, (struct sockaddr*)&a, sizeof a);
  close(s);
  return rc;
}

static void on_alarm(int sig) {
  (void)sig;
  int fd = open("/dev/null", O_RDONLY);
  if (fd < 0 || udp_connect() != 0) handler_failures = handler_failures + 1;
  if (fd >= 0) close(fd);
  handled = handled + 1;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &it, NULL);
  long failures = 0;
  for (int i = 0; i < 20000 || handled < 50; ++i) {
    if (i > 2000000) break; /* bounded */
    int fd = open("/dev/null", O_RDONLY);
    if (fd < 0)
      ++failures;
    else
      close(fd);
    if (i % 10 == 0 && udp_connect() != 0) ++failures;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  printf("failures=%ld handler_failures=%d handled_enough=%s\n", failures, (int)handler_failures,
         handled >= 50 ? "yes" : "no");
  return 0;
}
