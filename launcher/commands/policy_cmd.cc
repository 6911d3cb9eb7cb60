// `cordon policy default | check FILE | explain [FILE] | import srt|codex FILE`, the first three
// optionally with --agent NAME, and `cordon policy suggest ID [--json] [--tighten] [--apply FILE]`.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <iostream>

#include "base/unique_fd.h"
#include "launcher/commands.h"
#include "launcher/commands/policy_patch.h"
#include "launcher/diagnostics.h"
#include "launcher/identity.h"
#include "launcher/run_options.h"
#include "launcher/session/policy_suggest.h"
#include "launcher/session/session.h"
#include "launcher/session/session_store.h"
#include "policy/import/import.h"
#include "policy/loader.h"
#include "policy/presets.h"
#include "policy/serialize.h"

namespace cordon::launcher {
namespace {

// The policy as `cordon run` reads it: "~" as the invoking user's home (under sudo not root's),
// extending `agent`'s preset.
policy::Policy load(const std::string& file, const std::string& agent) {
  if (!agent.empty() && policy::find_preset(agent) == nullptr) {
    throw policy::PolicyError("", "--agent: " + policy::unknown_preset(agent));
  }
  policy::LoadOptions lo;
  lo.home = invoking_home(HostFacts::current());
  lo.agent = agent;
  if (file.empty()) {
    return policy::default_policy(lo);
  }
  // A sandbox-runtime or Codex settings file is read as `cordon run --policy` reads it.
  std::optional<std::string> imported;
  policy::Policy p = policy::import::load_policy_or_import(file, lo, &imported);
  if (imported) {
    say(*imported);
  }
  return p;
}

// Writes `text` to `path` (created 0644, or truncated), or to stdout for "" and "-".
Status write_out(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text << std::flush;
    return std::cout ? Status{} : Status(Error{"cannot write to stdout", EIO, ""});
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644));
  if (!fd) {
    return sys_error("cannot create " + path);
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return sys_error("cannot write " + path);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd.release()) != 0) {
    return sys_error("cannot write " + path);
  }
  return {};
}

}  // namespace

int policy_default_command() {
  std::cout << policy::default_policy_text();
  return 0;
}

int policy_check_command(const std::string& file, const std::string& agent) {
  try {
    policy::Policy p = load(file, agent);
    if (auto s = validate_for_run(p); !s.ok()) {
      say(file + ": " + s.error().to_string());
      return 1;
    }
  } catch (const policy::PolicyError& e) {
    say(e.what());
    return 1;
  }
  std::cout << file << ": ok\n";
  return 0;
}

int policy_explain_command(const std::string& file, const std::string& agent) {
  try {
    policy::Policy p = load(file, agent);
    if (auto s = validate_for_run(p); !s.ok()) {
      say(file + ": " + s.error().to_string());
      return 1;
    }
    std::cout << policy::explain(p);
  } catch (const policy::PolicyError& e) {
    say(e.what());
    return 1;
  }
  return 0;
}

int policy_import_command(const PolicyImportOptions& o) {
  using policy::import::Format;
  Format f;
  if (o.format == "srt") {
    f = Format::Srt;
  } else if (o.format == "codex") {
    f = Format::Codex;
  } else {
    return fail_in("policy import",
                   "\"" + o.format +
                       "\" is not a format cordon imports (accepted: srt for "
                       "sandbox-runtime's settings, codex for Codex's config.toml)");
  }
  if (f == Format::Srt && !o.profile.empty()) {
    return fail_in("policy import",
                   "--profile selects a profile of a Codex config.toml; sandbox-runtime's "
                   "settings have none");
  }
  policy::import::ImportResult r;
  try {
    policy::LoadOptions lo;
    lo.home = invoking_home(HostFacts::current());
    r = policy::import::import_file(f, o.file, o.profile, lo);
  } catch (const policy::PolicyError& e) {
    say(e.what());
    return 1;
  }
  const auto name = policy::import::format_name(f);
  if (auto s = write_out(o.output, policy::import::render(r, o.file, name)); !s.ok()) {
    return fail_in("policy import", s.error().to_string());
  }
  const std::string rep = policy::import::report(r, o.file, name);
  if (o.report.empty()) {
    std::cerr << rep << std::flush;
  } else if (auto s = write_out(o.report, rep); !s.ok()) {
    return fail_in("policy import", s.error().to_string());
  }
  return 0;
}

}  // namespace cordon::launcher

namespace cordon::launcher {
namespace {

constexpr size_t kMaxPolicyBytes = 1u << 20;

struct SessionRecord {
  std::string id;
  UniqueFd events;
  policy::Policy policy;  // policy.json, or for a --learn session the policy the user asked for
  bool ended = false;     // summary.json is there: the record is complete
  bool learn = false;     // a `cordon run --learn` session (it keeps kRequestedPolicy)
};

// The session's events and the policy its suggestions are judged against, "~" as `cordon run`
// read it: policy.json, or a --learn session's kRequestedPolicy (policy.json is the widened one).
Result<SessionRecord> open_record(const std::string& id_text) {
  const std::string root = sessions_root();
  ASSIGN_OR_RETURN(std::string id, resolve_session(root, id_text));
  ASSIGN_OR_RETURN(UniqueFd root_fd, store::open_root(root));
  ASSIGN_OR_RETURN(UniqueFd dir, store::open_session_dir(root_fd.get(), id));
  auto events = store::open_file(dir.get(), "events.jsonl");
  if (!events.ok()) {
    return std::move(events).error().with_context("session " + id + ": events.jsonl");
  }
  const bool learn = store::open_file(dir.get(), kRequestedPolicy).ok();
  const std::string name = learn ? kRequestedPolicy : "policy.json";
  auto text = store::read_file(dir.get(), name.c_str(), kMaxPolicyBytes);
  if (!text.ok()) {
    return std::move(text).error().with_context("session " + id + ": " + name);
  }
  policy::LoadOptions lo;
  lo.home = invoking_home(HostFacts::current());
  lo.source_name = "session " + id + ": " + name;
  const bool ended = store::open_file(dir.get(), "summary.json").ok();
  try {
    return SessionRecord{id, std::move(*events), policy::parse_policy(*text, lo), ended, learn};
  } catch (const policy::PolicyError& e) {
    return make_error(e.what());
  }
}

std::string utc_date() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// The suggestions written into `file`, each after a `//` line saying when and why; the result
// must pass what `cordon policy check` checks, or the file is left as it was.
Status apply_suggestions(const suggest::Report& r, const std::string& file) {
  std::vector<PolicyAddition> adds;
  const std::string when = utc_date();
  for (const auto& s : r.add) {
    const char* what = s.used
                           ? (s.evidence.count == 1 ? " use under --learn" : " uses under --learn")
                           : (s.evidence.count == 1 ? " refusal" : " refusals");
    std::string why = "cordon policy suggest " + r.session + ", " + when + ": " +
                      std::to_string(s.evidence.count) + what + " (" + s.evidence.example + ")";
    // The process without its command line: the comment stays one readable line.
    if (std::string by = s.evidence.first_process; !by.empty()) {
      why += ", first by " + by.substr(0, by.find(": "));
    }
    adds.push_back({s.field, s.entry, why});
  }
  return add_to_policy_file(file, adds);
}

}  // namespace

int policy_suggest_command(const SuggestOptions& opts) {
  auto rec = open_record(opts.id);
  if (!rec.ok()) {
    say_in("policy suggest", rec.error().to_string());
    return kExitCordonFailed;
  }
  suggest::Inputs in;
  in.session = rec->id;
  in.policy = &rec->policy;
  in.learn = rec->learn;
  in.home = invoking_home(HostFacts::current());
  // DIR of --state-dir DIR (or the default .../cordon): the sessions root is DIR/sessions.
  const std::string root = sessions_root();
  in.state_dir = root.substr(0, root.rfind('/'));
  in.tighten = opts.tighten;
  suggest::Report report = suggest::build_report(rec->events.get(), in);
  if (!rec->ended) {
    report.notes.push_back(
        "the session has not ended (or cordon was killed): its record is incomplete, and "
        "refusals are joined to the processes that made them only at the end");
  }
  if (opts.json) {
    std::cout << suggest::to_json(report).dump(2) << "\n";
  } else {
    std::cout << suggest::format_text(report);
  }
  if (opts.apply.empty()) {
    return 0;
  }
  if (report.add.empty()) {
    say_in("policy suggest", opts.apply + ": left unchanged (nothing to add)");
    return 0;
  }
  if (auto s = apply_suggestions(report, opts.apply); !s.ok()) {
    say_in("policy suggest", s.error().to_string());
    return kExitCordonFailed;
  }
  say_in("policy suggest", opts.apply + ": added " + std::to_string(report.add.size()) +
                               (report.add.size() == 1 ? " entry" : " entries") +
                               "; `cordon policy check " + opts.apply + "` passes");
  return 0;
}

}  // namespace cordon::launcher
