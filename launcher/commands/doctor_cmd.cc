// `cordon doctor`: every requirement checked at once (launcher/doctor/), as a table with the fix
// under each one that is not ok and a verdict, or as JSON.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/doctor/checks.h"

namespace cordon::launcher {
namespace {

using doctor::Check;
using doctor::State;

struct Verdict {
  int status = kDoctorOk;
  std::string line;
};

// The worst state decides; the line names every check behind it.
Verdict verdict(const std::vector<Check>& checks) {
  std::string missing, degraded;
  for (const Check& c : checks) {
    if (c.state == State::Missing) {
      missing += (missing.empty() ? "" : "; ") + c.name + " (" + c.consequence + ")";
    } else if (c.state == State::Degraded) {
      degraded += (degraded.empty() ? "" : "; ") + c.name + " (" + c.consequence + ")";
    }
  }
  if (!missing.empty()) {
    return {kDoctorCannotRun, "cordon cannot run here: " + missing};
  }
  if (!degraded.empty()) {
    return {kDoctorDegraded, "cordon can run here; degraded: " + degraded};
  }
  return {kDoctorOk, "cordon can run here with full protection"};
}

void print_table(const std::vector<Check>& checks, const Verdict& v) {
  size_t name_w = std::string("CHECK").size();
  size_t state_w = std::string("degraded").size();
  for (const Check& c : checks) {
    name_w = std::max(name_w, c.name.size());
  }
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w - s.size() + 2, ' '); };
  std::string indent(name_w + 2 + state_w + 2, ' ');
  std::string out = pad("CHECK", name_w) + pad("STATE", state_w) + "DETAIL\n";
  for (const Check& c : checks) {
    out += pad(c.name, name_w) + pad(doctor::state_name(c.state), state_w) + c.measured + "\n";
    if (c.state != State::Ok) {
      out += indent + "EFFECT: " + c.consequence + "\n";
      out += indent + "FIX: " + c.fix + "\n";
    }
  }
  out += v.line + "\n";
  std::cout << out << std::flush;
}

void print_json(const std::vector<Check>& checks, const Verdict& v, const doctor::StateDir& dir) {
  nlohmann::json j;
  j["checks"] = nlohmann::json::array();
  for (const Check& c : checks) {
    j["checks"].push_back({{"name", c.name},
                           {"state", doctor::state_name(c.state)},
                           {"measured", c.measured},
                           {"consequence", c.consequence},
                           {"fix", c.fix}});
  }
  j["state_dir"] = dir.path;
  j["result"] = v.status == kDoctorOk         ? "ok"
                : v.status == kDoctorDegraded ? "degraded"
                                              : "cannot-run";
  j["verdict"] = v.line;
  j["exit_status"] = v.status;
  std::cout << j.dump(2) << "\n" << std::flush;
}

}  // namespace

int doctor_command(const std::string& state_dir, bool json) {
  auto dir = doctor::resolve_state_dir(state_dir);
  if (!dir.ok()) {
    return fail_in("doctor", dir.error().to_string());
  }
  std::vector<Check> checks = doctor::run_all_checks(*dir);
  Verdict v = verdict(checks);
  if (json) {
    print_json(checks, v, *dir);
  } else {
    print_table(checks, v);
  }
  return v.status;
}

}  // namespace cordon::launcher
