// The memory limit the agents' runtimes survive: Node/V8, the JVM, a Go binary and (when there)
// Bun start under `--memory 1G`, whichever backend enforces it (a cgroup as root here, the
// RLIMIT_DATA stand-in rootless), and the limit still stops a real 2 GiB allocation in each.
// Under the old RLIMIT_AS stand-in the JVM did not start at all and Node's WebAssembly failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

// A statically linked Go program that touches N MiB: built once per test binary run.
std::string go_binary(const TempDir& dir) {
  write_text(dir / "main.go",
             "package main\n"
             "import (\"fmt\"; \"os\"; \"strconv\")\n"
             "func main() {\n"
             "  mb, _ := strconv.Atoi(os.Args[1])\n"
             "  b := make([]byte, mb<<20)\n"
             "  for i := 0; i < len(b); i += 4096 { b[i] = 1 }\n"
             "  fmt.Println(\"go allocated\", len(b)>>20)\n"
             "}\n");
  write_text(dir / "go.mod", "module t\n\ngo 1.19\n");
  auto r = run_program(
      {"sh", "-c",
       "cd '" + dir.path() + "' && GOCACHE='" + dir.path() + "/cache' GOPATH='" + dir.path() +
           "/gopath' GOFLAGS=-mod=mod " + "CGO_ENABLED=0 go build -o gobin . 2>&1"},
      {.deadline = std::chrono::seconds(180)});
  return r.exit_code() == 0 ? dir / "gobin" : "";
}

// Bun comes from npm (`npm i bun` ships the binary): $CORDON_TEST_BUN, else bun on PATH.
std::string bun_binary() {
  if (const char* b = std::getenv("CORDON_TEST_BUN"); b != nullptr && ::access(b, X_OK) == 0) {
    return b;
  }
  auto r = run_program({"sh", "-c", "command -v bun"});
  return r.exit_code() == 0 ? r.out.substr(0, r.out.find('\n')) : "";
}

TEST(MemoryRuntimes, StartUnderTheLimitAndAreStoppedAboveIt) {
  CORDON_REQUIRE(::access("/usr/bin/node", X_OK) == 0 && ::access("/usr/bin/java", X_OK) == 0 &&
                     ::access("/usr/bin/go", X_OK) == 0,
                 "node, java and go (.ci/setup installs them)");
  SandboxFixture f;
  f.make_workspace_owned();
  TempDir build;
  std::string gobin = go_binary(build);
  ASSERT_FALSE(gobin.empty()) << "go build failed";
  run_program({"chmod", "-R", "a+rX", build.path()});
  std::string bun = bun_binary();
  write_text(f.ws() + "/Big.java",
             "public class Big { public static void main(String[] a) {\n"
             "  int mb = Integer.parseInt(a[0]); byte[][] x = new byte[mb / 100][];\n"
             "  for (int i = 0; i < x.length; i++) { x[i] = new byte[100 << 20]; x[i][0] = 1; }\n"
             "  System.out.println(\"java allocated \" + mb); } }\n");
  struct Runtime {
    std::string name;
    std::vector<std::string> read;  // install trees to show
    std::string small, big;         // shell commands: a start with some work, then 2 GiB
  };
  std::vector<Runtime> runtimes = {
      {"node",
       {},
       "node -e 'new WebAssembly.Memory({initial: 1}); "
       "const b = Buffer.alloc(64 << 20, 1); console.log(\"node allocated\", b.length >> 20)'",
       "node -e 'const b = Buffer.alloc(2047 << 20, 1); console.log(\"node allocated\", "
       "b.length >> 20)'"},
      {"java", {}, "java -Xmx4g Big.java 100", "java -Xmx4g Big.java 2000"},
      {"go", {build.path()}, gobin + " 100", gobin + " 2000"},
  };
  if (!bun.empty()) {
    std::string dir = bun.substr(0, bun.rfind('/'));
    runtimes.push_back({"bun",
                        {dir},
                        bun + " -e 'const b = new Uint8Array(64 << 20); b.fill(1); "
                              "console.log(\"bun allocated\", b.length >> 20)'",
                        bun + " -e 'const b = new Uint8Array(2048 << 20); b.fill(1); "
                              "console.log(\"bun allocated\", b.length >> 20)'"});
  } else {
    std::printf("note: Bun not found (set CORDON_TEST_BUN to its binary): measured without it\n");
  }
  for (const auto& rt : runtimes) {
    std::vector<std::string> flags = {"-q", "--memory", "1G", "--timeout", "120s"};
    for (const auto& d : rt.read) {
      flags.insert(flags.end(), {"--read", d});
    }
    auto small =
        f.run(flags, {"sh", "-c", rt.small + " 2>&1"}, {.deadline = std::chrono::seconds(150)});
    EXPECT_EQ(small.exit_code(), 0) << rt.name << "\n" << small.out << small.err;
    EXPECT_NE(small.out.find(rt.name + " allocated"), std::string::npos)
        << rt.name << " did not start under --memory 1G:\n"
        << small.out << small.err;
    auto big =
        f.run(flags, {"sh", "-c", rt.big + " 2>&1"}, {.deadline = std::chrono::seconds(150)});
    EXPECT_NE(big.exit_code(), 0) << rt.name << "\n" << big.out;
    EXPECT_EQ(big.out.find(rt.name + " allocated"), std::string::npos)
        << rt.name << " allocated 2 GiB under --memory 1G:\n"
        << big.out;
  }
}

}  // namespace
}  // namespace cordon::testing
