// `cordon report` end to end: a real `cordon run` of a scripted, agent-like session, its report
// loaded by headless Chromium, and the DOM Chromium built checked for the lanes, rows and alerts;
// then the same with file names, argv and hostnames that try to break out of the page.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <regex>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

namespace cordon::launcher {
namespace {

using cordon::testing::Background;
using cordon::testing::read_text;
using cordon::testing::RunSpec;
using cordon::testing::SandboxFixture;
using cordon::testing::TempDir;
using cordon::testing::write_text;

const char* kChromium = "/usr/bin/chromium";

// A loopback HTTP server (port 0: the kernel picks a free one), printing its port.
std::unique_ptr<Background> start_server(const std::vector<std::string>& env) {
  auto srv = std::make_unique<Background>(
      std::vector<std::string>{
          "/usr/bin/python3", "-c",
          "import http.server\n"
          "class H(http.server.BaseHTTPRequestHandler):\n"
          "    def do_GET(self):\n"
          "        self.send_response(200); self.end_headers(); self.wfile.write(b'hello')\n"
          "    def log_message(self, *a): pass\n"
          "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
          "print(s.server_port, flush=True)\n"
          "s.serve_forever()\n"},
      env, "/");
  return srv;
}

std::string port_of(Background& srv) {
  std::string out = srv.read_until("\n", std::chrono::seconds(10));
  return out.substr(0, out.find('\n'));
}

// Chromium's DOM of `file` after the page's script ran.
std::string dump_dom(const std::string& file) {
  TempDir profile;
  std::vector<std::string> argv = {kChromium,       "--headless",
                                   "--disable-gpu", "--user-data-dir=" + profile.path(),
                                   "--dump-dom",    "file://" + file};
  if (::geteuid() == 0) {
    argv.insert(argv.begin() + 1, "--no-sandbox");  // Chromium refuses to run as root otherwise
  }
  RunSpec spec;
  spec.deadline = std::chrono::seconds(120);
  auto r = cordon::testing::run_program(argv, spec);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return r.out;
}

// `cordon report last -o FILE` in the fixture's store; returns the page.
std::string report(SandboxFixture& fx, const std::string& file) {
  RunSpec spec;
  spec.env = fx.env();
  auto r = cordon::testing::run_program(
      {cordon::testing::cordon_bin(), "report", "last", "-o", file}, spec);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("cordon report: session "), std::string::npos) << r.err;
  return read_text(file);
}

// The file loads nothing: no URL outside the escaped data block, no element that fetches.
void expect_no_external_reference(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"cordon-data\">";
  size_t a = page.find(open);
  ASSERT_NE(a, std::string::npos);
  size_t b = page.find("</script>", a);
  std::string rest = page.substr(0, a) + page.substr(b);
  EXPECT_EQ(rest.find("://"), std::string::npos);
  for (const char* needle : {" src=", " href=", "url(", "@import", "<link", "<iframe", "<img"}) {
    EXPECT_EQ(rest.find(needle), std::string::npos) << needle;
  }
  EXPECT_EQ(page.substr(a + open.size(), b - a - open.size()).find('<'), std::string::npos);
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

TEST(ReportBrowser, ScriptedSessionShowsLanesRowsAndAlerts) {
  CORDON_REQUIRE(::access(kChromium, X_OK) == 0, "chromium (apt-get install chromium)");
  SandboxFixture fx;
  auto srv = start_server(fx.env());
  std::string port = port_of(*srv);
  ASSERT_FALSE(port.empty());
  fx.make_workspace_owned();
  write_text(fx.ws() + "/a.txt", "one\n");
  write_text(fx.ws() + "/b.txt", "two\n");
  write_text(fx.ws() + "/d.txt", "three, to be renamed\n");
  write_text(fx.ws() + "/.env", "SECRET=1\n");
  write_text(fx.ws() + "/agent.sh",
             "echo changed >> a.txt; echo new > c.txt; rm b.txt; mv d.txt e.txt\n"
             "mkdir -p .vscode && echo '{}' > .vscode/settings.json\n"
             "cat .env\n"
             "cat ~/.aws/credentials > /dev/null\n"
             "curl -sS -m 20 -o /dev/null http://localhost:" +
                 port +
                 "/ok\n"
                 "curl -sS -m 20 -o /dev/null http://refused.test/\n"
                 "unshare -U true\n"
                 "exit 3\n");
  if (::geteuid() == 0) {
    for (const char* f : {"a.txt", "b.txt", "d.txt", ".env", "agent.sh"}) {
      (void)!::chown((fx.ws() + "/" + f).c_str(), SandboxFixture::kTestUid,
                     SandboxFixture::kTestUid);
    }
  }
  auto run =
      fx.run({"-q", "--mode", "cow", "--allow-host", "localhost:" + port}, {"sh", "agent.sh"});
  ASSERT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code(), 3) << run.err;

  TempDir out;
  std::string page = report(fx, out / "report.html");
  expect_no_external_reference(page);
  std::string dom = dump_dom(out / "report.html");
  ASSERT_NE(dom.find("id=\"summary\""), std::string::npos) << dom.substr(0, 2000);

  // Header.
  EXPECT_NE(dom.find("<dd data-field=\"command\">sh agent.sh</dd>"), std::string::npos);
  EXPECT_NE(dom.find("<dd data-field=\"exit\">exit 3</dd>"), std::string::npos);
  EXPECT_EQ(dom.find("data-field=\"learn\""), std::string::npos) << "not a --learn session";
  // Lanes: cordon, the shell, each curl (with its argv), unshare.
  EXPECT_NE(dom.find("class=\"lane\" data-lane=\"0\""), std::string::npos);
  EXPECT_EQ(count(dom, "data-exe=\"/usr/bin/curl\""), 2u);
  EXPECT_EQ(count(dom, "data-exe=\"/usr/bin/unshare\""), 1u);
  EXPECT_NE(dom.find("http://localhost:" + port + "/ok</title>"), std::string::npos)
      << "a lane's title holds its full argv";
  // Marks on the timeline.
  EXPECT_NE(dom.find("data-kind=\"net.http\""), std::string::npos);
  EXPECT_NE(dom.find("data-kind=\"net.refused\""), std::string::npos);
  EXPECT_NE(dom.find("class=\"mark alert\""), std::string::npos);
  // The network table: the refusal first, then the allowed host with its process.
  size_t refused = dom.find("data-host=\"refused.test\" data-port=\"80\" data-decision=\"deny\"");
  size_t allowed =
      dom.find("data-host=\"127.0.0.1\" data-port=\"" + port + "\" data-decision=\"allow\"");
  ASSERT_NE(refused, std::string::npos) << dom;
  ASSERT_NE(allowed, std::string::npos) << dom;
  EXPECT_LT(refused, allowed) << "refusals come first";
  EXPECT_NE(dom.find("<td class=\"process\">curl (pid ", allowed), std::string::npos);
  // Alerts: the refused user namespace, the canary read (a mark on the timeline too).
  EXPECT_NE(dom.find("<li class=\"alert\" data-category=\"process\""), std::string::npos);
  size_t canary = dom.find("<li class=\"alert\" data-category=\"canary\"");
  ASSERT_NE(canary, std::string::npos) << dom;
  EXPECT_NE(dom.find("canary touched: aws: ", canary), std::string::npos);
  EXPECT_NE(dom.find("data-kind=\"fs.canary\""), std::string::npos);
  // Files: every kind of change, and the protected directory (refused by cordon-fs, or kept in
  // the session and flagged on kernel overlayfs).
  for (const char* change :
       {"data-kind=\"modified\" data-path=\"a.txt\"", "data-kind=\"added\" data-path=\"c.txt\"",
        "data-kind=\"deleted\" data-path=\"b.txt\"", "data-kind=\"renamed\" data-path=\"e.txt\""}) {
    EXPECT_NE(dom.find(change), std::string::npos) << change;
  }
  EXPECT_TRUE(dom.find("class=\"fs-refusal\" data-path=\".vscode\"") != std::string::npos ||
              dom.find("data-path=\".vscode/settings.json\" data-protected=\"yes\"") !=
                  std::string::npos);
  EXPECT_NE(dom.find("<span class=\"diff-add\">+changed\n</span>"), std::string::npos)
      << "a.txt's text diff";
  // Nothing fetches: the only elements that could are absent.
  for (const char* tag : {"<img", "<iframe", "<link", "<object", "<embed"}) {
    EXPECT_EQ(dom.find(tag), std::string::npos) << tag;
  }
  // The page says how long it took to open (bench/report/open_time.py reads it), every view
  // timed.
  std::smatch m;
  const std::string html_tag = dom.substr(0, dom.find('>', dom.find("<html")));
  ASSERT_TRUE(std::regex_search(html_tag, m, std::regex(" data-rendered-ms=\"([0-9]+)\"")))
      << html_tag;
  EXPECT_GT(std::stoi(m[1]), 0);
  for (const char* phase : {"parse:", "data:", "timeline:", "network:", "files:", "layout:"}) {
    EXPECT_NE(html_tag.find(phase), std::string::npos) << phase << " in " << html_tag;
  }
}

TEST(ReportBrowser, ALearnSessionSaysSoInItsHeader) {
  CORDON_REQUIRE(::access(kChromium, X_OK) == 0, "chromium (apt-get install chromium)");
  SandboxFixture fx;
  auto run = fx.run({"-q", "--mode", "cow", "--learn"}, {"true"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  TempDir out;
  report(fx, out / "report.html");
  std::string dom = dump_dom(out / "report.html");
  EXPECT_NE(dom.find("<dd data-field=\"learn\">LEARN MODE (cordon run --learn): network open to "
                     "every public host name, every use recorded</dd>"),
            std::string::npos)
      << dom.substr(0, 3000);
}

TEST(ReportBrowser, HostileNamesArgvAndHostnamesStayText) {
  CORDON_REQUIRE(::access(kChromium, X_OK) == 0, "chromium (apt-get install chromium)");
  SandboxFixture fx;
  fx.make_workspace_owned();
  // File names cannot hold '/', so the </script> payload goes into argv, a hostname and a file's
  // contents (its diff); the element payloads into names of each kind. The argv is a shell's that
  // lives a while: a process gone before the collector could check its pid is recorded with its
  // pid only "claimed", and the timeline draws lanes for verified pids alone.
  write_text(
      fx.ws() + "/attack.py",
      "import socket, struct, subprocess\n"
      "P = ['</script><script>alert(1)</script>',\n"
      "     '<img src=x onerror=document.body.setAttribute(\"data-pwned\",1)>',\n"
      "     'javascript:alert(3)']\n"
      "subprocess.run(['/bin/sh', '-c', 'sleep 0.3'] + P)\n"
      "for name in P[1:]:\n"
      "    open(name, 'w').write(P[0] + '\\n')\n"
      "ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]\n"
      "for i, name in enumerate(P):\n"
      "    q = struct.pack('>HHHHHH', 0x1000 + i, 0x0100, 1, 0, 0, 0)\n"
      "    for label in name.split('.'):\n"
      "        q += bytes([len(label)]) + label.encode()\n"
      "    q += b'\\0' + struct.pack('>HH', 1, 1)\n"
      "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
      "    s.settimeout(5)\n"
      "    s.sendto(q, (ns, 53))\n"
      "    s.recv(512)\n");
  if (::geteuid() == 0) {
    (void)!::chown((fx.ws() + "/attack.py").c_str(), SandboxFixture::kTestUid,
                   SandboxFixture::kTestUid);
  }
  // An allowed host makes the session's network (and its DNS server) exist; nothing listens.
  auto run =
      fx.run({"-q", "--mode", "cow", "--allow-host", "localhost:9"}, {"python3", "attack.py"});
  ASSERT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code(), 0) << run.err;

  TempDir out;
  std::string page = report(fx, out / "report.html");
  expect_no_external_reference(page);
  std::string dom = dump_dom(out / "report.html");
  ASSERT_NE(dom.find("id=\"summary\""), std::string::npos) << dom.substr(0, 2000);

  // No injected element: the page's own two scripts, no img, no data-pwned set by onerror.
  EXPECT_EQ(count(dom, "<script"), 2u);
  EXPECT_EQ(dom.find("<img"), std::string::npos);
  EXPECT_EQ(dom.find("data-pwned=\""), std::string::npos);
  EXPECT_EQ(dom.find(" href="), std::string::npos);
  // Each payload is there as text: in a file name, a hostname, argv and a diff.
  const std::string p1 = "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;";
  const std::string p2 = "&lt;img src=x onerror=document.body.setAttribute(\"data-pwned\",1)&gt;";
  EXPECT_NE(dom.find("<td class=\"path\">" + p2 + "</td>"), std::string::npos) << "file name";
  EXPECT_NE(dom.find("<td class=\"path\">javascript:alert(3)</td>"), std::string::npos);
  EXPECT_NE(dom.find("<td class=\"host\">" + p1 + "</td>"), std::string::npos) << "hostname";
  // The proxy lowercases names (DNS is case-insensitive).
  std::string p2_lower = p2;
  p2_lower.replace(p2_lower.find("setAttribute"), 12, "setattribute");
  EXPECT_NE(dom.find("<td class=\"host\">" + p2_lower + "</td>"), std::string::npos);
  EXPECT_NE(dom.find("<td class=\"host\">javascript:alert(3)</td>"), std::string::npos);
  EXPECT_NE(dom.find("'" + p1 + "' '" + p2 + "' 'javascript:alert(3)'</title>"), std::string::npos)
      << "argv in a lane's title";
  EXPECT_NE(dom.find("<span class=\"diff-add\">+" + p1), std::string::npos) << "diff text";
}

}  // namespace
}  // namespace cordon::launcher
