// Runs path calls named on the command line and prints one line per call: "<op> <errno>" (0 on
// success; `read` prints the file's first line instead). Built dynamic (the shim sees it) and
// static (it cannot).
//   read PATH | readat DIR REL | write PATH | create PATH | creat PATH | fopen PATH MODE |
//   open_creat_ro PATH | rename A B | link A B | unlink P | mkdir P | symlink TARGET LINK |
//   truncate P | exec P | twice_read PATH
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void result(const char* op, int rc) { printf("%s %d\n", op, rc == 0 ? 0 : errno); }

static void read_line(const char* op, int fd) {
  if (fd < 0) {
    printf("%s %d\n", op, errno);
    return;
  }
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
  char* nl = strchr(buf, '\n');
  if (nl != NULL) {
    *nl = '\0';
  }
  printf("%s =%s\n", op, buf);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc;) {
    const char* op = argv[i];
    const char* a = i + 1 < argc ? argv[i + 1] : "";
    const char* b = i + 2 < argc ? argv[i + 2] : "";
    if (strcmp(op, "read") == 0) {
      read_line(op, open(a, O_RDONLY | O_CLOEXEC));
      i += 2;
    } else if (strcmp(op, "twice_read") == 0) {
      read_line(op, open(a, O_RDONLY | O_CLOEXEC));
      read_line(op, openat(AT_FDCWD, a, O_RDONLY | O_CLOEXEC));
      i += 2;
    } else if (strcmp(op, "readat") == 0) {
      int d = open(a, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      read_line(op, d < 0 ? -1 : openat(d, b, O_RDONLY | O_CLOEXEC));
      if (d >= 0) close(d);
      i += 3;
    } else if (strcmp(op, "write") == 0) {
      int fd = open(a, O_WRONLY | O_APPEND | O_CLOEXEC);
      if (fd >= 0) close(fd);
      result(op, fd < 0 ? -1 : 0);
      i += 2;
    } else if (strcmp(op, "create") == 0) {
      int fd = open(a, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        (void)!write(fd, "created\n", 8);
        close(fd);
      }
      result(op, fd < 0 ? -1 : 0);
      i += 2;
    } else if (strcmp(op, "open_creat_ro") == 0) {
      int fd = open(a, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
      result(op, fd < 0 ? -1 : 0);
      i += 2;
    } else if (strcmp(op, "creat") == 0) {
      int fd = creat(a, 0644);
      if (fd >= 0) close(fd);
      result(op, fd < 0 ? -1 : 0);
      i += 2;
    } else if (strcmp(op, "fopen") == 0) {
      FILE* f = fopen(a, b);
      if (f != NULL) fclose(f);
      result(op, f == NULL ? -1 : 0);
      i += 3;
    } else if (strcmp(op, "rename") == 0) {
      result(op, rename(a, b));
      i += 3;
    } else if (strcmp(op, "link") == 0) {
      result(op, link(a, b));
      i += 3;
    } else if (strcmp(op, "unlink") == 0) {
      result(op, unlink(a));
      i += 2;
    } else if (strcmp(op, "mkdir") == 0) {
      result(op, mkdir(a, 0755));
      i += 2;
    } else if (strcmp(op, "symlink") == 0) {
      result(op, symlink(a, b));
      i += 3;
    } else if (strcmp(op, "truncate") == 0) {
      result(op, truncate(a, 0));
      i += 2;
    } else if (strcmp(op, "exec") == 0) {
      pid_t pid = fork();
      if (pid == 0) {
        char* args[] = {(char*)a, NULL};
        execv(a, args);
        _exit(100 + (errno & 0x7f));
      }
      int st = 0;
      waitpid(pid, &st, 0);
      int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      printf("%s %d\n", op, code >= 100 ? code - 100 : 0);
      i += 2;
    } else {
      fprintf(stderr, "fs_probe: unknown op %s\n", op);
      return 2;
    }
  }
  return 0;
}
