// suggest::build_report on a written record: which refusals become which entries, which are held
// back and why, the subdomain note, and --tighten's unused entries. (policy_suggest_test.cc runs
// the whole loop for real; this covers the cases a real run cannot stage safely.)
#include <fcntl.h>
#include <gmock/gmock.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/unique_fd.h"
#include "launcher/session/policy_suggest.h"
#include "policy/loader.h"
#include "tests/launcher/sandbox_fixture.h"

namespace cordon::launcher::suggest {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_text;
using Entries = std::vector<std::pair<std::string, std::string>>;

class Record {
 public:
  Record() {
    ::mkdir((dir_.path() + "/data").c_str(), 0755);
    ::mkdir((dir_.path() + "/out").c_str(), 0755);
    ::mkdir((dir_.path() + "/home").c_str(), 0755);
    ::mkdir((dir_.path() + "/home/.ssh").c_str(), 0755);
    ::mkdir((dir_.path() + "/var").c_str(), 0755);
    ::mkdir((dir_.path() + "/var/state").c_str(), 0755);
    write_text(dir_.path() + "/data/f.csv", "a\n");
    write_text(dir_.path() + "/data/decoy", "x\n");
    write_text(dir_.path() + "/home/.ssh/id_ed25519", "k\n");
    policy::LoadOptions lo;
    lo.home = home();
    policy_ = policy::parse_policy(
        R"({"version": 1, "network": {"allow": ["unused.test:1", "used.test:443"],
            "deny": ["evil.test"]}})",
        lo);
  }
  std::string path(const std::string& rel) const { return dir_.path() + "/" + rel; }
  std::string home() const { return dir_.path() + "/home"; }
  void add(nlohmann::json ev) {
    ev["ts"] = "2026-11-27T10:00:00.000000Z";
    text_ += ev.dump() + "\n";
  }
  Report report(bool tighten = false, bool learn = false) {
    write_text(path("events.jsonl"), text_);
    UniqueFd fd(::open(path("events.jsonl").c_str(), O_RDONLY | O_CLOEXEC));
    Inputs in;
    in.session = "20261127-100000-abcdef";
    in.policy = &policy_;
    in.workspace = path("ws");
    in.home = home();
    in.state_dir = path("var/state");
    in.tighten = tighten;
    in.learn = learn;
    return build_report(fd.get(), in);
  }

 private:
  TempDir dir_;
  policy::Policy policy_;
  std::string text_;
};

nlohmann::json refused(const std::string& name, int port, const std::string& rule,
                       const std::string& client = "") {
  return {{"kind", "net.refused"}, {"source", "netproxy"}, {"name", name},    {"port", port},
          {"rule", rule},          {"decision", "deny"},   {"client", client}};
}

nlohmann::json failed_open(const std::string& path, int err, int flags = O_RDONLY) {
  return {{"kind", "fs.open"},
          {"source", "shim"},
          {"path", path},
          {"errno", err},
          {"flags", flags},
          {"pid", 7},
          {"exe", "/usr/bin/python3"}};
}

Entries entries(const Report& r) {
  Entries out;
  for (const auto& s : r.add) {
    out.emplace_back(s.field, s.entry);
  }
  return out;
}

const HeldBack* held(const Report& r, const std::string& what) {
  for (const auto& h : r.held_back) {
    if (h.what == what) {
      return &h;
    }
  }
  return nullptr;
}

nlohmann::json allowed(const std::string& kind, const std::string& name, int port,
                       nlohmann::json more = nlohmann::json::object()) {
  more["kind"] = kind;
  more["source"] = "netproxy";
  more["name"] = name;
  more["port"] = port;
  more["decision"] = "allow";
  more["rule"] = "network.allow[2]";  // the "*" --learn appended after the file's two entries
  return more;
}

// A --learn session: what the widening allowed and the given policy would not is suggested,
// counted once per request (or per stream that carried none); what the given policy allows, a
// connection cut for exfiltration and a lookup followed by a connection add nothing more.
TEST(PolicySuggestReport, UsesInALearnSessionBecomeEntriesAgainstTheGivenPolicy) {
  Record rec;
  // Two requests on one keep-alive connection, then its net.connect (mode http): two uses.
  for (const char* path : {"/a", "/b"}) {
    rec.add(allowed("net.http", "api.test", 8080,
                    {{"method", "GET"},
                     {"url", std::string("http://api.test:8080") + path},
                     {"client", "127.0.0.1:40000"}}));
  }
  rec.add(allowed("net.connect", "api.test", 8080,
                  {{"mode", "http"}, {"end", "closed"}, {"client", "127.0.0.1:40000"}}));
  rec.add({{"kind", "net.attribution"},
           {"of", "net.http"},
           {"client", "127.0.0.1:40000"},
           {"pid", 12},
           {"exe", "/usr/bin/curl"},
           {"argv", {"curl", "http://api.test:8080/a"}}});
  // A TLS stream: one use, from its net.connect.
  rec.add(allowed("net.connect", "tls.test", 443, {{"mode", "transparent"}, {"sni", "tls.test"}}));
  // Allowed by the given policy: nothing to add.
  rec.add(allowed("net.connect", "used.test", 443, {{"mode", "transparent"}}));
  // Cut for carrying a placeholder: held back by net.exfil, not a use.
  rec.add({{"kind", "net.exfil"},
           {"source", "netproxy"},
           {"name", "other.test"},
           {"port", 80},
           {"credential", "MY_TOKEN"},
           {"method", "GET"},
           {"url", "http://other.test/?t=x"}});
  rec.add(allowed("net.connect", "other.test", 80, {{"mode", "http"}, {"end", "exfil"}}));
  // A lookup answered, then a connection: the connection's name:port says it.
  rec.add(allowed("net.dns", "tls.test", 0, {{"type", "A"}}));
  // A lookup alone: its getaddrinfo port.
  rec.add({{"kind", "net.dns"}, {"source", "shim"}, {"name", "dl.test"}, {"service", "8443"}});
  rec.add(allowed("net.dns", "dl.test", 0, {{"type", "A"}}));

  Report r = rec.report(/*tighten=*/false, /*learn=*/true);
  EXPECT_TRUE(r.learn);
  EXPECT_EQ(entries(r), (Entries{{"network.allow", "api.test:8080"},
                                 {"network.allow", "dl.test:8443"},
                                 {"network.allow", "tls.test:443"}}));
  ASSERT_EQ(r.add.size(), 3u);
  EXPECT_TRUE(r.add[0].used);
  EXPECT_EQ(r.add[0].evidence.count, 2u);
  EXPECT_EQ(r.add[0].evidence.example, "GET http://api.test:8080/a");
  EXPECT_THAT(r.add[0].evidence.first_process, HasSubstr("curl (pid 12)"));
  EXPECT_THAT(r.add[0].why, HasSubstr("was used under --learn"));
  EXPECT_EQ(r.add[2].evidence.count, 1u);
  EXPECT_EQ(r.add[2].evidence.example, "connection to tls.test:443");
  ASSERT_EQ(r.held_back.size(), 1u);
  EXPECT_EQ(r.held_back[0].what, "other.test:80");
  EXPECT_THAT(format_text(r), HasSubstr("(learn mode): 3 additions"));
  EXPECT_EQ(to_json(r)["learn"], true);

  // The same record read as an ordinary session: nothing was refused, so nothing is added.
  EXPECT_EQ(entries(rec.report()), Entries{});
}

TEST(PolicySuggestReport, NetworkRefusalsBecomeExactEntriesOrAreHeldBack) {
  Record rec;
  const std::string none = "network.allow (no match)";
  rec.add(refused("api.test", 8443, none, "127.0.0.1:40000"));
  rec.add(refused("api.test", 8443, none, "127.0.0.1:40002"));
  rec.add({{"kind", "net.attribution"},
           {"of", "net.refused"},
           {"client", "127.0.0.1:40000"},
           {"pid", 12},
           {"exe", "/usr/bin/curl"},
           {"argv", {"curl", "https://api.test:8443/"}}});
  // Lookups: one covered by the refused connection above, one with only getaddrinfo's port.
  for (const char* name : {"api.test", "dl.test"}) {
    rec.add({{"kind", "net.dns"},
             {"source", "netproxy"},
             {"decision", "deny"},
             {"name", name},
             {"type", "A"},
             {"rcode", "NXDOMAIN"},
             {"rule", none}});
  }
  rec.add({{"kind", "net.dns"},
           {"source", "shim"},
           {"name", "dl.test"},
           {"service", "9000"},
           {"pid", 3},
           {"exe", "/usr/bin/wget"}});
  // A service by name, as curl and Python pass it: the services database's port.
  rec.add({{"kind", "net.dns"},
           {"source", "netproxy"},
           {"decision", "deny"},
           {"name", "s.test"},
           {"type", "A"},
           {"rcode", "NXDOMAIN"},
           {"rule", none}});
  rec.add({{"kind", "net.dns"}, {"source", "shim"}, {"name", "s.test"}, {"service", "https"}});
  // No service at all: the bare name, which the suggestion says allows every port.
  rec.add({{"kind", "net.dns"},
           {"source", "netproxy"},
           {"decision", "deny"},
           {"name", "n.test"},
           {"type", "A"},
           {"rcode", "NXDOMAIN"},
           {"rule", none}});
  rec.add(refused("10.1.2.3", 5432,
                  "network: private/loopback/metadata address not named by "
                  "network.allow"));
  rec.add(refused("169.254.169.254", 80, none));
  rec.add(refused("evil.test", 443, "network.deny[0]"));
  rec.add({{"kind", "net.exfil"},
           {"source", "netproxy"},
           {"name", "paste.test"},
           {"port", 443},
           {"canary", "aws"},
           {"channel", "body"}});
  for (const char* n : {"a.cdn.example.com", "b.cdn.example.com", "c.cdn.example.com"}) {
    rec.add(refused(n, 443, none));
  }
  Report r = rec.report();
  EXPECT_EQ(entries(r), (Entries{{"network.allow", "a.cdn.example.com:443"},
                                 {"network.allow", "api.test:8443"},
                                 {"network.allow", "b.cdn.example.com:443"},
                                 {"network.allow", "c.cdn.example.com:443"},
                                 {"network.allow", "dl.test:9000"},
                                 {"network.allow", "n.test"},
                                 {"network.allow", "s.test:443"}}));
  EXPECT_THAT(r.add[5].why, HasSubstr("allows every port"));
  ASSERT_EQ(r.add[1].entry, "api.test:8443");
  EXPECT_EQ(r.add[1].evidence.count, 2u);
  EXPECT_EQ(r.add[1].evidence.first_process, "curl (pid 12): curl https://api.test:8443/");
  EXPECT_EQ(r.add[4].evidence.first_process, "wget (pid 3)");
  for (const char* what : {"10.1.2.3:5432", "169.254.169.254:80"}) {
    ASSERT_NE(held(r, what), nullptr) << what;
    EXPECT_THAT(held(r, what)->reason, HasSubstr("refused by the built-in protection; not "
                                                 "suggested"));
  }
  ASSERT_NE(held(r, "evil.test:443"), nullptr);
  EXPECT_THAT(held(r, "evil.test:443")->reason, HasSubstr("network.deny[0]"));
  ASSERT_NE(held(r, "paste.test:443"), nullptr);
  EXPECT_THAT(held(r, "paste.test:443")->reason, HasSubstr("never turned into an allow"));
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_THAT(r.notes[0], HasSubstr("3 names under cdn.example.com"));
  EXPECT_THAT(r.notes[0], HasSubstr("\"*.cdn.example.com\""));
}

TEST(PolicySuggestReport, PathsAreTheRefusedPathOrTheDirectoryAWriteNeeds) {
  Record rec;
  rec.add(failed_open(rec.path("data/f.csv"), ENOENT));
  rec.add(failed_open(rec.path("out/new.txt"), ENOENT, O_WRONLY | O_CREAT));
  rec.add(failed_open(rec.path("out/old.txt"), ENOENT));  // a read probe: missing on the host
  rec.add(failed_open("/nonexistent/cordon-probe", ENOENT));
  rec.add(failed_open("/usr/lib/nothing-here.so", ENOENT));
  rec.add(failed_open("relative.txt", EACCES));
  rec.add(failed_open(rec.home() + "/.ssh/id_ed25519", EACCES));
  rec.add({{"kind", "fs.canary"},
           {"source", "shim"},
           {"path", rec.path("data/decoy")},
           {"canary", "aws"}});
  rec.add(failed_open(rec.path("data/decoy"), EACCES));
  Report r = rec.report();
  EXPECT_EQ(entries(r), (Entries{{"filesystem.write", rec.path("out")},
                                 {"filesystem.read", rec.path("data/f.csv")}}));
  EXPECT_EQ(r.add[1].evidence.first_process, "python3 (pid 7)");
  ASSERT_NE(held(r, rec.home() + "/.ssh/id_ed25519"), nullptr);
  EXPECT_THAT(held(r, rec.home() + "/.ssh/id_ed25519")->reason, HasSubstr("filesystem.deny["));
  ASSERT_NE(held(r, rec.path("data/decoy")), nullptr);
  EXPECT_THAT(held(r, rec.path("data/decoy"))->reason, HasSubstr("canary"));
  EXPECT_EQ(r.held_back.size(), 2u);
}

// The record's names and paths come from the program: a pattern in one never becomes an entry.
TEST(PolicySuggestReport, PatternsInTheRecordAreNeverSuggested) {
  Record rec;
  const std::string none = "network.allow (no match)";
  rec.add(refused("*", 80, none));
  rec.add(refused("*.example.com", 443, none));
  rec.add(refused("10.0.0.0/8", 0, none));
  rec.add(failed_open(rec.path("out/*"), ENOENT, O_WRONLY | O_CREAT));
  rec.add(failed_open(rec.path("data/../data/f.csv"), ENOENT));
  rec.add(failed_open(rec.home(), ENOENT));
  rec.add(failed_open(rec.path("newfile"), ENOENT, O_WRONLY | O_CREAT));
  Report r = rec.report();
  EXPECT_EQ(entries(r), Entries{}) << format_text(r);
  for (const auto& what :
       {std::string("*:80"), std::string("*.example.com:443"), std::string("10.0.0.0/8"),
        rec.path("out/*"), rec.path("data/../data/f.csv"), rec.home()}) {
    EXPECT_NE(held(r, what), nullptr) << what << "\n" << format_text(r);
  }
}

// A bound Unix socket at `path` (closed: the file stays, as a dead service's would).
bool make_socket(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (!fd || path.size() >= sizeof sa.sun_path) {
    return false;
  }
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
}

// A grant of a socket connects the sandbox to the host service behind it: never suggested, nor
// a directory holding one, nor the directories for them (/run, also through a symlink).
TEST(PolicySuggestReport, SocketsAndTheirDirectoriesAreNeverSuggested) {
  Record rec;
  ::mkdir(rec.path("svc").c_str(), 0755);
  ::mkdir(rec.path("tree").c_str(), 0755);
  ::mkdir(rec.path("tree/deep").c_str(), 0755);
  ASSERT_TRUE(make_socket(rec.path("svc/docker.sock")));
  ASSERT_TRUE(make_socket(rec.path("tree/deep/agent.sock")));
  ASSERT_EQ(::symlink("/run", rec.path("runlink").c_str()), 0);
  rec.add(failed_open(rec.path("svc/docker.sock"), ENOENT, O_RDWR));
  rec.add(failed_open(rec.path("tree"), ENOENT));
  rec.add(failed_open("/run/cordon-suggest-test.pid", ENOENT, O_WRONLY | O_CREAT));
  rec.add(failed_open("/run", ENOENT));
  rec.add(failed_open(rec.path("runlink"), ENOENT));
  rec.add(failed_open(rec.path("data/f.csv"), ENOENT));
  Report r = rec.report();
  EXPECT_EQ(entries(r), (Entries{{"filesystem.read", rec.path("data/f.csv")}})) << format_text(r);
  const std::string why = "not suggested: a socket grants a connection to a host service";
  for (const auto& [what, detail] : std::vector<std::pair<std::string, std::string>>{
           {rec.path("svc/docker.sock"), "docker.sock is a socket"},
           {rec.path("tree"), "holds the socket " + rec.path("tree/deep/agent.sock")},
           {"/run/cordon-suggest-test.pid", "/run is in /run"},
           {"/run", "/run is in /run"},
           {rec.path("runlink"), "/run is in /run"}}) {
    const HeldBack* h = held(r, what);
    ASSERT_NE(h, nullptr) << what << "\n" << format_text(r);
    EXPECT_THAT(h->reason, HasSubstr(why));
    EXPECT_THAT(h->reason, HasSubstr(detail));
    EXPECT_EQ(h->evidence.count, 1u);
    EXPECT_EQ(h->evidence.first_process, "python3 (pid 7)");
  }
  EXPECT_THAT(format_text(r), HasSubstr("\n  " + rec.path("svc/docker.sock") + ": " + why));
}

// cordon's own state directory: no path in it, and no directory holding it.
TEST(PolicySuggestReport, CordonsStateDirectoryIsNeverSuggested) {
  Record rec;
  ::mkdir(rec.path("var/state/sessions").c_str(), 0755);
  write_text(rec.path("var/state/sessions/events.jsonl"), "{}\n");
  rec.add(failed_open(rec.path("var/state/sessions/events.jsonl"), EACCES, O_RDWR));
  rec.add(failed_open(rec.path("var/new.txt"), ENOENT, O_WRONLY | O_CREAT));
  rec.add(failed_open(rec.path("var"), ENOENT));
  Report r = rec.report();
  EXPECT_EQ(entries(r), Entries{}) << format_text(r);
  for (const auto& what :
       {rec.path("var/state/sessions/events.jsonl"), rec.path("var/new.txt"), rec.path("var")}) {
    const HeldBack* h = held(r, what);
    ASSERT_NE(h, nullptr) << what << "\n" << format_text(r);
    EXPECT_THAT(h->reason, HasSubstr("cordon's own state directory (" + rec.path("var/state")));
  }
}

// Names that cannot be or must not be an allow entry are held back one by one; the rest stay.
TEST(PolicySuggestReport, EachSuggestionIsCheckedOnItsOwn) {
  Record rec;
  const std::string none = "network.allow (no match)";
  auto lookup = [](const std::string& name) {
    return nlohmann::json{{"kind", "net.dns"},
                          {"source", "netproxy"},
                          {"decision", "deny"},
                          {"name", name},
                          {"type", "A"},
                          {"rcode", "NXDOMAIN"},
                          {"rule", "network.allow (no match)"}};
  };
  rec.add(lookup("localhost"));
  rec.add(lookup("METADATA.google.internal."));
  rec.add(refused("metadata.google.internal", 80, none));
  rec.add(refused("instance-data", 80, none));
  rec.add(refused("api.test", 8443, none));
  // A path with a NUL from a hostile record: the host sees the part before it, the loader the
  // whole, which it refuses.
  rec.add(failed_open(rec.path("data") + std::string("\0/x", 3), ENOENT));
  Report r = rec.report();
  EXPECT_EQ(entries(r), (Entries{{"network.allow", "api.test:8443"}})) << format_text(r);
  ASSERT_NE(held(r, "localhost"), nullptr) << format_text(r);
  EXPECT_THAT(held(r, "localhost")->reason, HasSubstr("names the host's loopback; not suggested"));
  for (const char* what :
       {"METADATA.google.internal.", "metadata.google.internal:80", "instance-data:80"}) {
    ASSERT_NE(held(r, what), nullptr) << what << "\n" << format_text(r);
    EXPECT_THAT(held(r, what)->reason, HasSubstr("a cloud metadata service's name"));
  }
  const HeldBack* nul = held(r, rec.path("data") + std::string("\0/x", 3));
  ASSERT_NE(nul, nullptr) << format_text(r);
  EXPECT_THAT(nul->reason, HasSubstr("cordon does not take it as a filesystem.read entry"));
  EXPECT_THAT(nul->reason, HasSubstr("NUL"));

  // A connection to a host loopback name and port: it would hand over a service of the host.
  Record other;
  other.add(refused("localhost", 5432, none));
  r = other.report();
  EXPECT_EQ(entries(r), Entries{});
  ASSERT_NE(held(r, "localhost:5432"), nullptr) << format_text(r);
  EXPECT_THAT(held(r, "localhost:5432")->reason, HasSubstr("names the host's loopback"));
}

TEST(PolicySuggestReport, TightenListsTheAllowEntriesNothingUsed) {
  Record rec;
  rec.add({{"kind", "net.connect"},
           {"source", "netproxy"},
           {"name", "used.test"},
           {"port", 443},
           {"rule", "network.allow[1]"},
           {"decision", "allow"}});
  Report r = rec.report(/*tighten=*/true);
  EXPECT_TRUE(r.add.empty());
  ASSERT_EQ(r.unused.size(), 1u);
  EXPECT_EQ(r.unused[0].field, "network.allow[0]");
  EXPECT_EQ(r.unused[0].entry, "unused.test:1");
  EXPECT_THAT(format_text(r), HasSubstr(": nothing to suggest"));
  EXPECT_EQ(to_json(r)["unused"][0]["entry"], "unused.test:1");
}

}  // namespace
}  // namespace cordon::launcher::suggest
