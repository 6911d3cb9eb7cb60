// lookup_floor DIR N: lstat(2) of N names that do not exist under DIR, twice over the same names,
// printing the mean time per call of each pass in microseconds ("first" and "again").
//
// Through a FUSE mount each such lstat is one LOOKUP request answered ENOENT: the kernel never
// keeps a negative FUSE dentry valid without an entry timeout, and a new name has no dentry at
// all. So "again" minus the native figure is close to what one request round trip costs (the
// daemon's own work for a missing name is two cached negative lookups on the host), the floor
// under every request an untar or a create pays.
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

static double pass(const char* dir, long n) {
  char path[4096];
  struct stat st;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/no-such-name-%ld", dir, i);
    if (lstat(path, &st) == 0) {
      fprintf(stderr, "lookup_floor: %s exists; give an empty directory\n", path);
      exit(1);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n / 1e3;
}

int main(int argc, char** argv) {
  if (argc != 3 || atol(argv[2]) <= 0) {
    fprintf(stderr, "usage: lookup_floor DIR N\n");
    return 2;
  }
  long n = atol(argv[2]);
  double first = pass(argv[1], n);
  double again = pass(argv[1], n);
  printf("%.2f %.2f\n", first, again);
  return 0;
}
