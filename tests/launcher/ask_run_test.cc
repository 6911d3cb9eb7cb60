// `cordon run --ask` for real, through a pseudo-terminal (ask_pty.py): each answer typed at
// cordon's terminal changes exactly what it should for a loopback server reached by a pinned name
// network.allow does not name, "always" edits the policy file so that `policy check` passes and
// the next run asks nothing, and without a terminal cordon refuses to start.
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "tests/launcher/sandbox_fixture.h"
#include "tests/netproxy/fixture.h"

namespace cordon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class AskRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_test_files(files_));
    up_ = std::make_unique<Upstreams>(std::vector<std::string>{"root=" + files_ / "www"});
    ASSERT_TRUE(up_->ok());
    ::chmod(files_.path().c_str(), 0755);
    policy_ = files_ / "policy.json";
    // asked.test is pinned to the host's loopback and allowed by nothing: only an answer lets
    // it through.
    write_text(policy_, R"({"version": 1, "network": {"allow": ["api.test:1"], )"
                        R"("resolve": {"asked.test": "127.0.0.1", "api.test": "127.0.0.1"}}})");
    ::chmod(policy_.c_str(), 0666);  // rootless: the asker, as the test's user, edits it
  }
  std::string port() const { return std::to_string(up_->port("http")); }
  std::string url() const { return "http://asked.test:" + port() + "/hello.txt"; }
  std::string fetch() const { return "curl -sS " + url() + " 2>&1; echo rc=$?; "; }

  // `cordon run --ask FLAGS -- sh -c SCRIPT` on a pty, answering the questions with `keys`.
  // `answer_after`: how long each question stays open before its key is typed.
  RunResult ask(const std::string& keys, const std::string& script,
                std::vector<std::string> flags = {}, double answer_after = 0.1) {
    std::vector<std::string> argv = {"python3", source_path("tests/launcher/ask_pty.py"),
                                     keys,      cordon_bin(),
                                     "run",     "-q",
                                     "--ask",   "--workspace",
                                     f_.ws(),   "--policy",
                                     policy_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", script});
    RunSpec spec;
    spec.env = f_.env();
    spec.env->push_back("ASK_PTY_WAIT=" + std::to_string(answer_after));
    spec.cwd = f_.ws();
    spec.deadline = std::chrono::seconds(100);
    return run_program(argv, spec);
  }
  std::vector<nlohmann::json> events(const std::string& kind) {
    RunSpec spec;
    spec.env = f_.env();
    auto r = run_program({cordon_bin(), "log", "last", "--json"}, spec);
    std::vector<nlohmann::json> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      auto ev = nlohmann::json::parse(line, nullptr, false);
      if (ev.is_object() && ev.value("kind", "") == kind) {
        out.push_back(ev);
      }
    }
    return out;
  }
  std::string policy_text() const { return read_text(policy_); }
  int policy_check() {
    RunSpec spec;
    spec.env = f_.env();
    return run_program({cordon_bin(), "policy", "check", policy_}, spec).exit_code();
  }

  TempDir files_;
  std::unique_ptr<Upstreams> up_;
  SandboxFixture f_;
  std::string policy_;
};

constexpr const char* kHello = "hello through cordon\nrc=0\n";
constexpr const char* kPrompt = "cordon: the sandbox asks to connect to asked.test:";

TEST_F(AskRun, OnceAllowsThisConnectionAndTheNextIsAskedAgain) {
  const std::string before = policy_text();
  auto r = ask("od", fetch() + fetch());
  ASSERT_THAT(r.out, HasSubstr("exit 0\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("prompts 2\n"));
  EXPECT_EQ(count_of(r.out, kPrompt), 2u) << r.out;
  // The question names the destination and how it came; the first answer lets curl through,
  // the second (deny) refuses with the reason.
  EXPECT_THAT(r.out, HasSubstr(kPrompt + port() + " (http, from "));
  // ...the request, read before the question (an absolute-form request to the proxy)...
  EXPECT_THAT(r.out, HasSubstr("\n  request GET /hello.txt\n"));
  // ...and the process connecting, as /proc shows it outside the sandbox, with its parents up to
  // the program cordon started.
  EXPECT_THAT(r.out, HasSubstr("  by pid "));
  EXPECT_THAT(r.out, HasSubstr("/curl: curl -sS " + url() + "\n  under pid "));
  EXPECT_THAT(r.out, HasSubstr("sh: /bin/sh -c curl -sS "));
  EXPECT_THAT(r.out, Not(HasSubstr("as its preload shim reports")));
  EXPECT_THAT(r.out, HasSubstr(kHello));
  EXPECT_THAT(r.out, HasSubstr("cordon: asked.test:" + port() +
                               " is not in network.allow: denied at cordon's terminal\nrc=0\n"));
  EXPECT_EQ(policy_text(), before);
  auto asked = events("net.decider");
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0]["method"], "GET");
  EXPECT_EQ(asked[0]["path"], "/hello.txt");
  // The proxy names the process where it may read the sandbox's /proc: rootless, where it runs
  // as the owner of the sandbox's user namespace. As root it runs as the sandbox's user, and the
  // kernel refuses it; the prompt's process then comes from cordon's own lookup (above).
  if (::geteuid() != 0) {
    EXPECT_THAT(asked[0].value("exe", ""), HasSubstr("curl"));
    EXPECT_EQ(asked[0]["argv"].at(0), "curl");
    EXPECT_GE(asked[0]["parent_pids"].size(), 1u);
  } else {
    EXPECT_FALSE(asked[0].contains("exe")) << asked[0].dump();
  }
  EXPECT_EQ(asked[0]["decided_by"], "person");
  EXPECT_EQ(asked[0]["decision"], "allow");
  EXPECT_EQ(asked[0]["scope"], "once");
  EXPECT_EQ(asked[1]["decision"], "deny");
  auto refused = events("net.refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["decided_by"], "person");
  EXPECT_EQ(refused[0]["name"], "asked.test");
}

TEST_F(AskRun, SessionAllowsEveryLaterConnectionWithoutAsking) {
  const std::string before = policy_text();
  auto r = ask("s", fetch() + fetch() + fetch());
  ASSERT_THAT(r.out, HasSubstr("exit 0\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("prompts 1\n"));
  EXPECT_EQ(count_of(r.out, kHello), 3u) << r.out;
  EXPECT_EQ(policy_text(), before);
  auto asked = events("net.decider");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0]["scope"], "session");
  auto connects = events("net.connect");
  size_t by_person = 0;
  for (const auto& c : connects) {
    by_person += c.value("source", "") == "netproxy" && c.value("decided_by", "") == "person";
  }
  EXPECT_EQ(by_person, 3u);
}

TEST_F(AskRun, AlwaysAddsTheEntryAndTheNextRunAsksNothing) {
  // As root, the file is someone else's: it stays theirs.
  const uid_t owner = ::geteuid() == 0 ? 65534 : ::geteuid();
  ASSERT_EQ(::chown(policy_.c_str(), owner, static_cast<gid_t>(-1)), 0);
  auto r = ask("a", fetch() + fetch());
  ASSERT_THAT(r.out, HasSubstr("exit 0\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("prompts 1\n"));
  EXPECT_EQ(count_of(r.out, kHello), 2u) << r.out;
  const std::string text = policy_text();
  // The entry, after a comment saying how, when, in which session and by whom it was added.
  EXPECT_THAT(text, HasSubstr("\"asked.test:" + port() + "\""));
  const std::string session = events("session.start").at(0).value("session", "");
  ASSERT_FALSE(session.empty());
  EXPECT_THAT(text, HasSubstr("// cordon run --ask, session " + session + ", 20"));
  EXPECT_THAT(text, HasSubstr(": allowed by "));
  EXPECT_THAT(text, HasSubstr(" at the terminal, asked by 127.0.0.1:"));
  EXPECT_THAT(text, HasSubstr("\"api.test:1\""));  // what was there stays
  EXPECT_EQ(policy_check(), 0) << text;
  struct stat st {};
  ASSERT_EQ(::stat(policy_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner);
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  // Under the edited file nothing is asked: the policy allows it.
  auto again = ask("", fetch());
  ASSERT_THAT(again.out, HasSubstr("exit 0\n")) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("prompts 0\n"));
  EXPECT_THAT(again.out, HasSubstr(kHello));
  EXPECT_TRUE(events("net.decider").empty());
}

TEST_F(AskRun, DenyAlwaysAddsANetworkDenyEntry) {
  auto r = ask("D", fetch() + fetch());
  ASSERT_THAT(r.out, HasSubstr("exit 0\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("prompts 1\n"));
  EXPECT_EQ(count_of(r.out, "is not in network.allow: denied at cordon's terminal\nrc=0\n"), 2u)
      << r.out;
  nlohmann::json parsed = nlohmann::json::parse(policy_text(), nullptr, false, true);
  ASSERT_TRUE(parsed.is_object()) << policy_text();
  EXPECT_EQ(parsed["network"]["deny"], nlohmann::json::array({"asked.test:" + port()}));
  EXPECT_EQ(parsed["network"]["allow"], nlohmann::json::array({"api.test:1"}));
  EXPECT_THAT(policy_text(), HasSubstr(": denied by "));
  EXPECT_EQ(policy_check(), 0);
  // The next run refuses it by the policy, without asking.
  auto again = ask("", fetch());
  EXPECT_THAT(again.out, HasSubstr("prompts 0\n"));
  EXPECT_THAT(again.out, Not(HasSubstr("hello through cordon")));
  EXPECT_TRUE(events("net.decider").empty());
}

TEST_F(AskRun, NoAnswerWithinTheTimeoutDenies) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = ask(".", fetch(), {"--ask-timeout", "1s"});
  ASSERT_THAT(r.out, HasSubstr("exit 0\n")) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_THAT(r.out, HasSubstr("prompts 1\n"));
  // The proxy's refusal and the terminal's note both come when the time is up, in either order.
  EXPECT_THAT(r.out, HasSubstr("(the decider did not answer within 1 s)\n"));
  EXPECT_THAT(r.out, HasSubstr("rc=0\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("hello through cordon")));
  // The proxy's timer starts first, so the program may end (and the question be withdrawn)
  // just before the asker's own time is up.
  EXPECT_THAT(r.out, ::testing::AnyOf(HasSubstr("no answer in time, denied"),
                                      HasSubstr("the program has ended, denied")));
  auto refused = events("net.refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["decided_by"], "timeout");
}

TEST_F(AskRun, TheProgramCannotRedrawAnOpenQuestionAndLosesNoOutput) {
  // While its connection waits, the program prints a sequence that would move the cursor up over
  // the question and rewrite it to name another host, then more than every buffer on the way
  // holds. None of it reaches the terminal before the answer; all of it after.
  const std::string script =
      "curl -sS " + url() + " >got 2>&1 & sleep 1.5; " +
      // Spelled with escapes: the shell's own command line, shown with the question, must not
      // hold the text it prints.
      "printf '\\033[3A\\r\\033[2Kcordon: the sandbox asks\\040to connect to pypi\\056org:443 "
      "RE\\104RAWN\\n'; "
      "head -c 300000 /dev/zero | tr '\\0' x; echo; echo printed-all; wait; cat got";
  auto r = ask("o", script, {}, 4.0);
  ASSERT_THAT(r.out, HasSubstr("exit 0\n")) << r.err;
  EXPECT_THAT(r.out, HasSubstr("prompts 1\n"));
  const size_t prompt = r.out.find(kPrompt + port() + " (http, from ");
  const size_t answered = r.out.find("<answered>");
  const size_t redrawn = r.out.find("pypi.org:443 REDRAWN");
  ASSERT_NE(prompt, std::string::npos);
  ASSERT_NE(answered, std::string::npos);
  ASSERT_NE(redrawn, std::string::npos);
  EXPECT_LT(prompt, answered);
  EXPECT_GT(redrawn, answered) << "the program's bytes reached the terminal while asking";
  EXPECT_GT(r.out.find("asked.test:" + port() + " allowed once"), answered);
  // Whatever the program left the terminal in is reset before the question is written.
  EXPECT_THAT(r.out,
              HasSubstr(std::string("\x18\x1b\\\x1b[!p\x1b[?7h\x1b[0m\x0f\x1b(B\n") + kPrompt));
  const size_t all = r.out.find(std::string(300000, 'x') + "\nprinted-all\n");
  EXPECT_NE(all, std::string::npos) << "output was lost";
  EXPECT_GT(all, answered);
  EXPECT_THAT(r.out, HasSubstr("hello through cordon\n"));
}

TEST_F(AskRun, TheProgramCannotReadTheAnswer) {
  // The program reads its terminal (cordon's, relayed through the sandbox's pty) while its
  // connection waits: the key typed for the question reaches cordon, not the program.
  auto r = ask("o", "(timeout 3 head -c 1 > got; echo \"got=[$(cat got)]\") & sleep 0.5; " +
                        fetch() + "wait");
  ASSERT_THAT(r.out, HasSubstr("exit 0\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("prompts 1\n"));
  EXPECT_THAT(r.out, HasSubstr(kHello));
  EXPECT_THAT(r.out, HasSubstr("got=[]")) << r.out;
}

TEST_F(AskRun, AProgramThatEndsMidQuestionLeavesTheTerminalAsItWas) {
  // The program ends while its question is open: the question is withdrawn (denied) and the
  // terminal is back in its own mode (line editing, echo) once cordon exits, with the terminal
  // relayed (stdin a terminal) and without (stdin /dev/null).
  for (const std::string stdin_from : {"", " </dev/null"}) {
    std::vector<std::string> argv = {"python3",
                                     source_path("tests/launcher/ask_pty.py"),
                                     ".",
                                     "/bin/sh",
                                     "-c",
                                     "'" + cordon_bin() + "' run -q --ask --workspace '" + f_.ws() +
                                         "' --policy '" + policy_ + "' -- /bin/sh -c 'curl -sS " +
                                         url() + " & sleep 1; kill -9 $$'" + stdin_from +
                                         "; stty -a </dev/tty"};
    RunSpec spec;
    spec.env = f_.env();
    spec.cwd = f_.ws();
    auto r = run_program(argv, spec);
    ASSERT_THAT(r.out, HasSubstr("prompts 1\n")) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr(": the program has ended, denied\n")) << stdin_from;
    EXPECT_THAT(r.out, HasSubstr(" icanon ")) << stdin_from << r.out;
    EXPECT_THAT(r.out, HasSubstr(" echo ")) << stdin_from << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("hello through cordon")));
  }
}

TEST_F(AskRun, WithoutATerminalItRefusesToStart) {
  // setsid: a new session has no controlling terminal (and the test's stdio is pipes).
  RunSpec spec;
  spec.env = f_.env();
  spec.cwd = f_.ws();
  auto r = run_program({"setsid", "-w", cordon_bin(), "run", "--ask", "--workspace", f_.ws(),
                        "--policy", policy_, "--", "/bin/echo", "ran"},
                       spec);
  EXPECT_EQ(r.exit_code(), 125) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("ran")));
  EXPECT_THAT(r.err, HasSubstr("--ask: cordon has no controlling terminal to ask on"));
  // Together with another decider: refused too, before anything starts.
  auto both = ask("", "echo ran", {"--decider", "true"});
  EXPECT_THAT(both.out, HasSubstr("exit 125\n"));
  EXPECT_THAT(both.out, HasSubstr("--ask: cordon itself is the decider"));
  EXPECT_THAT(both.out, Not(HasSubstr("\nran\n")));
}

}  // namespace
}  // namespace cordon::testing
