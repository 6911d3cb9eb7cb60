/* Multithreaded workload: 8 threads open/close files, connect UDP sockets and resolve localhost;
 * prints a deterministic summary. Used to check the shim changes nothing under concurrency. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { kThreads = 8, kRounds = 2000 };

static void* work(void* arg) {
  long id = (long)arg;
  long ok = 0;
  for (int i = 0; i < kRounds; ++i) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ++ok;
      close(fd);
    }
    if (i % 100 == 0) {
      int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9)};
      inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
      if (connect(s, (struct sockaddr*)&a, sizeof a) == 0) ++ok;
      close(s);
      struct addrinfo* res = NULL;
      struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
      if (getaddrinfo("localhost", "80", &hints, &res) == 0) {
        ++ok;
        freeaddrinfo(res);
      }
    }
  }
  return (void*)(ok + id * 0);
}

int main(void) {
  pthread_t t[kThreads];
  for (long i = 0; i < kThreads; ++i) pthread_create(&t[i], NULL, work, (void*)i);
  long total = 0;
  for (int i = 0; i < kThreads; ++i) {
    void* r;
    pthread_join(t[i], &r);
    total += (long)r;
  }
  printf("threads=%d ok=%ld\n", kThreads, total);
  return 0;
}
