// The report's builder without a browser: the escaping of the data block, the lanes and joins,
// the alerts, the network rows, the size budget, and `cordon report`'s file handling.
#include <openssl/evp.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "launcher/commands/report/event_budget.h"
#include "launcher/commands/report/event_view.h"
#include "launcher/commands/report/model.h"
#include "launcher/commands/report/page.h"
#include "launcher/commands/report/report_cmd.h"
#include "launcher/session/session.h"
#include "policy/loader.h"
#include "tests/support/test_env.h"

namespace cordon::launcher::report {
namespace {

using nlohmann::json;

const std::string kBreakout = "</script><script>alert(1)</script>";
const std::string kImg = "<img src=x onerror=alert(2)>";

// The text between `open` and the next `close` in `page`.
std::string between(const std::string& page, const std::string& open, const std::string& close) {
  size_t a = page.find(open);
  if (a == std::string::npos) {
    return {};
  }
  a += open.size();
  return page.substr(a, page.find(close, a) - a);
}

std::string data_block(const std::string& page) {
  return between(page, "<script type=\"application/json\" id=\"cordon-data\">", "</script>");
}

std::string lines(const std::vector<json>& events) {
  std::string out;
  for (const auto& e : events) {
    out += e.dump() + "\n";
  }
  return out;
}

json ev(const std::string& ts_us, const std::string& source, const std::string& kind,
        json fields = json::object()) {
  fields["ts"] = "2026-11-27T10:00:00." + ts_us + "Z";
  fields["source"] = source;
  fields["kind"] = kind;
  fields["session"] = "20261127-100000-abcdef";
  return fields;
}

// A small agent-like session: sh starts curl; curl's connection is allowed, another refused for
// the metadata address; cordon-fs refuses a write; a limit is reached.
std::vector<json> agent_events() {
  json cred_sh = {{"pid", 5001}, {"uid", 1000}, {"gid", 1000}};
  json cred_curl = {{"pid", 5002}, {"uid", 1000}, {"gid", 1000}};
  return {
      ev("000000", "launcher", "session.start", {{"argv", {"sh", "agent.sh"}}}),
      ev("100000", "shim", "proc.start",
         {{"pid", 2},
          {"ppid", 1},
          {"exe", "/usr/bin/dash"},
          {"argv", {"sh", "agent.sh"}},
          {"cred", cred_sh}}),
      ev("200000", "shim", "proc.exec",
         {{"pid", 3}, {"ppid", 2}, {"exe", "/usr/bin/dash"}, {"path", "/usr/bin/curl"}}),
      ev("210000", "shim", "proc.start",
         {{"pid", 3},
          {"ppid", 2},
          {"exe", "/usr/bin/curl"},
          {"argv", {"curl", "api.test"}},
          {"cred", cred_curl}}),
      ev("300000", "netproxy", "net.http",
         {{"name", "api.test"},
          {"port", 443},
          {"decision", "allow"},
          {"rule", "network.allow[0]"},
          {"client", "127.0.0.1:40000"},
          {"method", "GET"},
          {"status", 200}}),
      ev("310000", "netproxy", "net.connect",
         {{"name", "api.test"},
          {"port", 443},
          {"decision", "allow"},
          {"rule", "network.allow[0]"},
          {"client", "127.0.0.1:40000"},
          {"bytes_out", 100},
          {"bytes_in", 2000}}),
      ev("400000", "netproxy", "net.refused",
         {{"address", "169.254.169.254"},
          {"name", ""},
          {"port", 80},
          {"decision", "deny"},
          {"client", "127.0.0.1:40001"},
          {"rule", "network (metadata address 169.254.169.254 not named in network.allow)"}}),
      ev("500000", "fusefs", "fs.refused",
         {{"path", ".git/hooks/pre-commit"},
          {"op", "create"},
          {"pid", 5001},
          {"rule", "filesystem.protect[0]"},
          {"decision", "deny"}}),
      ev("600000", "launcher", "limit.hit", {{"limit", "pids"}, {"value", 64}}),
      ev("700000", "launcher", "net.attribution",
         {{"client", "127.0.0.1:40000"}, {"pid", 3}, {"of", "net.http"}}),
      ev("700001", "launcher", "net.attribution",
         {{"client", "127.0.0.1:40001"}, {"pid", 3}, {"of", "net.refused"}}),
      ev("800000", "launcher", "session.end", {{"exit_code", 4}, {"duration_ms", 800}}),
  };
}

json model_of(const std::vector<json>& events) {
  SessionRecord rec;
  rec.id = "20261127-100000-abcdef";
  add_events(rec, lines(events));
  return build_model(rec);
}

size_t lane_of_kind(const json& m, const std::string& kind) {
  for (const auto& e : m["events"]) {
    if (e.is_object() && e["e"]["kind"] == kind) {
      return e["l"].get<size_t>();
    }
  }
  return 9999;
}

TEST(ReportPage, DataBlockCannotEndTheScriptOrHoldLineTerminators) {
  json j = {{"a", kBreakout}, {"b", "<!-- x & y -->"}, {"c", "line\u2028sep\u2029par"}};
  std::string s = script_safe_json(j);
  EXPECT_EQ(s.find('<'), std::string::npos) << s;
  EXPECT_EQ(s.find('>'), std::string::npos) << s;
  EXPECT_EQ(s.find('&'), std::string::npos) << s;
  EXPECT_EQ(s.find("\xE2\x80\xA8"), std::string::npos) << s;
  EXPECT_EQ(s.find("\xE2\x80\xA9"), std::string::npos) << s;
  EXPECT_EQ(json::parse(s), j) << "the escapes are JSON's own: the data reads back unchanged";
}

TEST(ReportPage, InvalidUtf8InAnEventStillMakesAValidPage) {
  std::string line = R"({"ts":"2026-11-27T10:00:00.000001Z","source":"shim","kind":"fs.open",)"
                     "\"path\":\"bad\xff\xfe<\"}\n";
  SessionRecord rec;
  rec.id = "x";
  add_events(rec, line);
  std::string page = render_page(build_model(rec));
  std::string data = data_block(page);
  json back = json::parse(data, nullptr, false);
  ASSERT_FALSE(back.is_discarded()) << data;
  EXPECT_EQ(data.find('<'), std::string::npos);
}

TEST(ReportPage, EventsGoOnTheLaneOfTheProcessThatCausedThem) {
  json m = model_of(agent_events());
  const json& lanes = m["lanes"];
  ASSERT_EQ(lanes.size(), 3u) << lanes.dump();  // cordon, sh, curl
  EXPECT_EQ(lanes[1]["exe"], "/usr/bin/dash");
  EXPECT_EQ(lanes[2]["exe"], "/usr/bin/curl");
  EXPECT_EQ(lanes[2]["parent"], lanes[1]["id"]);
  EXPECT_EQ(lanes[2]["depth"], 2);
  size_t sh = lanes[1]["id"], curl = lanes[2]["id"];
  EXPECT_EQ(lane_of_kind(m, "proc.exec"), sh) << "a fork's exec is drawn on its parent";
  EXPECT_EQ(lane_of_kind(m, "net.http"), curl) << "proxy events join through net.attribution";
  EXPECT_EQ(lane_of_kind(m, "net.refused"), curl);
  EXPECT_EQ(lane_of_kind(m, "fs.refused"), sh) << "cordon-fs's host pid maps through cred.pid";
  EXPECT_EQ(lane_of_kind(m, "session.start"), 0u);
  EXPECT_EQ(m["events"][0]["e"].count("session"), 0u) << "the session id is said once";
}

TEST(ReportPage, ALearnSessionSaysSoInTheHeader) {
  std::vector<json> events = agent_events();
  EXPECT_FALSE(model_of(events)["header"].contains("learn"));
  events[0]["learn"] = true;
  EXPECT_EQ(model_of(events)["header"]["learn"], true);
}

// A process gone before the collector could check its pid (a quick probe such as `unshare -U
// true`) still gets its lane, marked claimed; a claimed pid never takes the lane of the verified
// process it names, nor a verified event the claimed lane.
TEST(ReportPage, AProcessWithOnlyAClaimedPidGetsALaneOfItsOwn) {
  auto events = agent_events();
  events.insert(events.end() - 1, {ev("710000", "shim", "proc.start",
                                      {{"claimed", {{"pid", 9}, {"ppid", 2}}},
                                       {"exe", "/usr/bin/unshare"},
                                       {"argv", {"unshare", "-U", "true"}}}),
                                   ev("710001", "shim", "proc.start",
                                      {{"claimed", {{"pid", 3}, {"ppid", 2}}},
                                       {"exe", "/usr/bin/evil"},
                                       {"argv", {"evil", "claims", "curl's pid"}}}),
                                   ev("710002", "shim", "net.connect", {{"pid", 3}, {"ppid", 2}})});
  json m = model_of(events);
  const json* probe = nullptr;
  const json* liar = nullptr;
  for (const auto& l : m["lanes"]) {
    if (l["exe"] == "/usr/bin/unshare") probe = &l;
    if (l["exe"] == "/usr/bin/evil") liar = &l;
  }
  ASSERT_NE(probe, nullptr) << m["lanes"].dump();
  EXPECT_EQ((*probe)["pid"], 9);
  EXPECT_EQ((*probe)["claimed"], true);
  EXPECT_EQ((*probe)["argv"].size(), 3u);
  EXPECT_EQ((*probe)["parent"], m["lanes"][1]["id"]) << "under sh, whose pid it claimed as parent";
  ASSERT_NE(liar, nullptr);
  EXPECT_NE((*liar)["id"], m["lanes"][2]["id"]) << "not curl's lane";
  EXPECT_EQ(m["lanes"][2]["exe"], "/usr/bin/curl");
  EXPECT_EQ(m["lanes"][2]["claimed"], false);
  size_t curl = m["lanes"][2]["id"];
  size_t connect_lane = 9999;
  for (const auto& e : m["events"]) {
    if (e.is_object() && e["e"]["kind"] == "net.connect" && e["e"].value("source", "") == "shim") {
      connect_lane = e["l"].get<size_t>();
    }
  }
  EXPECT_EQ(connect_lane, curl) << "a verified event of pid 3 stays on curl's lane";
}

TEST(ReportPage, NetworkRowsPutRefusalsFirstWithTheirProcess) {
  json m = model_of(agent_events());
  const json& rows = m["network"]["rows"];
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["host"], "169.254.169.254");
  EXPECT_EQ(rows[0]["decision"], "deny");
  EXPECT_EQ(rows[1]["host"], "api.test");
  EXPECT_EQ(rows[1]["port"], "443");
  EXPECT_EQ(rows[1]["requests"], 1);
  EXPECT_EQ(rows[1]["connections"], 1);
  EXPECT_EQ(rows[1]["bytes_out"], 100);
  EXPECT_EQ(rows[1]["bytes_in"], 2000);
  EXPECT_EQ(rows[1]["rules"], json({"network.allow[0]"}));
  EXPECT_EQ(rows[1]["lane"], m["lanes"][2]["id"]);
}

TEST(ReportPage, AlertsNameMetadataLimitsExfiltrationAndFronting) {
  auto events = agent_events();
  events.push_back(ev("810000", "netproxy", "net.exfil",
                      {{"name", "paste.test"}, {"port", 443}, {"reason", "canary in body"}}));
  events.push_back(ev("820000", "netproxy", "net.refused",
                      {{"name", "cdn.test"}, {"port", 443}, {"rule", "network (name mismatch)"}}));
  events.push_back(ev("830000", "netproxy", "net.refused",
                      {{"address", "10.0.0.1"},
                       {"port", 22},
                       {"rule",
                        "network: private/loopback/metadata address not named by "
                        "network.allow"}}));
  events.push_back(ev("840000", "fusefs", "fs.canary", {{"path", "/home/u/.aws/credentials"}}));
  events.push_back(
      ev("850000", "netproxy", "net.refused",
         {{"name", "plain.test"}, {"port", 80}, {"rule", "network.allow (no match)"}}));
  json m = model_of(events);
  std::map<std::string, std::string> by_cat;
  for (const auto& a : m["alerts"]["list"]) {
    by_cat[a["category"]] = a["text"];
  }
  EXPECT_NE(by_cat["metadata"].find("169.254.169.254:80"), std::string::npos) << m["alerts"];
  EXPECT_NE(by_cat["limit"].find("pids"), std::string::npos);
  EXPECT_NE(by_cat["exfil"].find("paste.test:443"), std::string::npos);
  EXPECT_NE(by_cat["fronting"].find("cdn.test"), std::string::npos);
  EXPECT_NE(by_cat["private"].find("10.0.0.1:22"), std::string::npos);
  EXPECT_NE(by_cat["canary"].find(".aws/credentials"), std::string::npos);
  EXPECT_EQ(by_cat.size(), 6u) << "an ordinary refusal is a table row, not an alert";
}

TEST(ReportPage, HostileTextIsEscapedForTheScreenAndBounded) {
  std::string bidi = "evil\u202Etxt.exe";
  std::string huge(100000, 'A');
  json m = model_of({ev("000001", "shim", "fs.open", {{"path", bidi}, {"blob", huge}})});
  const json& e = m["events"][0]["e"];
  EXPECT_EQ(e["path"], "evil\\u202etxt.exe") << "a bidi override cannot reorder the page";
  EXPECT_LE(e["blob"].get<std::string>().size(), kMaxString + 8);
}

// Renders a page for `events` and checks the parts a browser would fetch or run.
void expect_self_contained(const std::string& page) {
  std::string data = data_block(page);
  ASSERT_FALSE(data.empty());
  std::string rest = page;
  rest.erase(rest.find(data), data.size());
  EXPECT_EQ(rest.find("://"), std::string::npos) << "no URL outside the escaped data";
  for (const char* needle : {" src=", " href=", "url(", "@import", "<link", "<iframe", "<img"}) {
    EXPECT_EQ(rest.find(needle), std::string::npos) << needle;
  }
  EXPECT_EQ(data.find('<'), std::string::npos);
  // The CSP names the page's own script by hash and allows no fetch.
  std::string csp = between(page, "Content-Security-Policy\" content=\"", "\"");
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  std::string script = between(page, "<script>", "</script>");
  unsigned char md[32];
  unsigned int n = 0;
  ASSERT_EQ(EVP_Digest(script.data(), script.size(), md, &n, EVP_sha256(), nullptr), 1);
  unsigned char b64[64];
  int len = EVP_EncodeBlock(b64, md, n);
  std::string hash = "'sha256-" + std::string(reinterpret_cast<char*>(b64), len) + "'";
  EXPECT_NE(csp.find("script-src " + hash), std::string::npos) << csp;
}

TEST(ReportPage, PageLoadsNothingAndRunsOnlyItsOwnScript) {
  auto events = agent_events();
  events.push_back(ev("900000", "netproxy", "net.refused",
                      {{"name", kBreakout}, {"url", "https://x.test/" + kImg}, {"port", 443}}));
  expect_self_contained(render_page(model_of(events)));
}

// `n` events of an agent-like mix (a refusal in ten, the rest file opens with the shim's
// process fields).
std::vector<json> many_events(int n) {
  std::vector<json> events = {ev("000000", "launcher", "session.start")};
  json cred = {{"pid", 7000}, {"uid", 1000}, {"gid", 1000}};
  json argv = {"python3", "agent.py", "--model", "m", "--task", std::string(80, 't')};
  events.push_back(
      ev("000100", "shim", "proc.start",
         {{"pid", 2}, {"ppid", 1}, {"exe", "/usr/bin/python3"}, {"argv", argv}, {"cred", cred}}));
  for (int i = 0; i < n - 3; ++i) {
    char us[8];
    std::snprintf(us, sizeof us, "%06d", 200 + (i * 90) % 999000);
    if (i % 10 == 0) {
      events.push_back(ev(us, "netproxy", "net.refused",
                          {{"name", "blocked" + std::to_string(i) + ".test"},
                           {"port", 443},
                           {"decision", "deny"},
                           {"rule", "network.allow (no match)"},
                           {"reason", "cordon: not in network.allow"}}));
    } else {
      events.push_back(ev(us, "shim", "fs.open",
                          {{"pid", 2},
                           {"ppid", 1},
                           {"exe", "/usr/bin/python3"},
                           {"argv", argv},
                           {"cred", cred},
                           {"flags", 0},
                           {"path", "/workspace/src/module_" + std::to_string(i) + ".py&<>"}}));
    }
  }
  events.push_back(ev("999999", "launcher", "session.end", {{"exit_code", 0}}));
  return events;
}

size_t whole_refusals(const json& m) {
  size_t n = 0;
  for (const auto& e : m["events"]) {
    n += e.is_object() && e["e"]["kind"] == "net.refused" && e["e"].contains("reason") ? 1 : 0;
  }
  return n;
}

// The report of 10,000 events holds every one and stays under 2 MiB; at 40,000 it still does,
// with every refusal whole and the file opens cut short.
TEST(ReportPage, TenThousandEventsFitInTwoMebibytes) {
  json m = model_of(many_events(10000));
  std::string page = render_page(m);
  EXPECT_LT(page.size(), 2u << 20);
  EXPECT_EQ(whole_refusals(m), 1000u);
  EXPECT_EQ(m["omitted"], 0u);

  m = model_of(many_events(40000));
  page = render_page(m);
  EXPECT_LT(page.size(), 2u << 20);
  EXPECT_EQ(whole_refusals(m), 4000u);
  EXPECT_GT(m["summarized"].get<size_t>(), 0u);
}

TEST(ReportPage, BudgetKeepsNotableEventsFirstWhenEvenBriefsDoNotFit) {
  std::vector<EventCost> costs(5, EventCost{100, 10, false});
  costs.push_back({100, 10, true});
  auto fit = fit_events(costs, 115);
  EXPECT_EQ(fit[5], Fit::Whole) << "the refusal at the end keeps its room";
  EXPECT_EQ(fit[0], Fit::Brief);
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(fit[i], Fit::Omitted) << i;
  }
  fit = fit_events(costs, 600);
  EXPECT_EQ(fit, std::vector<Fit>(6, Fit::Whole));
  fit = fit_events(costs, 250);  // the briefs (150) fit, one ordinary event can be whole again
  EXPECT_EQ(fit, std::vector<Fit>(
                     {Fit::Whole, Fit::Brief, Fit::Brief, Fit::Brief, Fit::Brief, Fit::Whole}));
}

class ReportCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::setenv("CORDON_STATE_DIR", tmp_.path().c_str(), 1), 0);
    root_ = tmp_ / "sessions";
    auto s = Session::create(policy::default_policy(), {"sh", "-c", kBreakout}, "/w");
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    ASSERT_TRUE(s->started(9, "").ok());
    SessionEnd end;
    end.exit_code = 2;
    ASSERT_TRUE(s->finish(end).ok());
    id_ = s->id();
  }
  void TearDown() override { ::unsetenv("CORDON_STATE_DIR"); }
  int report(const ReportOptions& o, std::string* out) {
    std::ostringstream s;
    int rc = report_command(root_, o, s);
    *out = s.str();
    return rc;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  testing::TempDir tmp_;
  std::string root_, id_;
};

TEST_F(ReportCommandTest, WritesOnceRefusesToOverwriteAndForceReplaces) {
  std::string out;
  const std::string file = tmp_ / "r.html";
  ASSERT_EQ(report({.id = "last", .output = file}, &out), 0);
  std::string first = slurp(file);
  EXPECT_NE(first.find(id_), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the report holds the record: the user's alone";
  { std::ofstream(file) << "mine"; }
  EXPECT_EQ(report({.id = "last", .output = file}, &out), 1);
  EXPECT_EQ(slurp(file), "mine") << "an existing file is never replaced without --force";
  EXPECT_EQ(report({.id = "last", .output = file, .force = true}, &out), 0);
  EXPECT_EQ(slurp(file), first);
  ASSERT_EQ(report({.id = id_, .output = "-"}, &out), 0);
  EXPECT_EQ(out, first) << "-o - writes the same page to stdout";
  EXPECT_EQ(report({.id = "ffffff", .output = "-"}, &out), 125) << "an unknown id fails";
  EXPECT_EQ(report({.id = "last", .output = tmp_ / "no/such/dir/r.html"}, &out), 125);
}

}  // namespace
}  // namespace cordon::launcher::report
