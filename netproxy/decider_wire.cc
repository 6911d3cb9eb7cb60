// Decider protocol lines: the question's JSON and the reply's strict parser.
#include "netproxy/decider_wire.h"

#include <nlohmann/json.hpp>
#include <optional>

namespace cordon::netproxy {

std::string question_line(const DeciderQuestion& q) {
  nlohmann::json j = {{"v", kDeciderProtocol}, {"id", q.id},     {"kind", q.kind},
                      {"host", q.host},        {"port", q.port}, {"mode", q.mode}};
  auto add_if_set = [&j](const char* key, const std::string& value) {
    if (!value.empty()) {
      j[key] = value;
    }
  };
  add_if_set("client", q.client);
  add_if_set("sni", q.sni);
  add_if_set("address", q.address);
  add_if_set("method", q.method);
  add_if_set("path", q.path);
  if (!q.process.empty()) {
    auto as_json = [](const SandboxProcess& p) {
      nlohmann::json o = {{"pid", p.pid}, {"argv", p.argv}};
      if (!p.exe.empty()) {
        o["exe"] = p.exe;
      }
      return o;
    };
    j["process"] = as_json(q.process.front());
    j["parents"] = nlohmann::json::array();
    for (size_t i = 1; i < q.process.size(); ++i) {
      j["parents"].push_back(as_json(q.process[i]));
    }
  }
  // replace: a name is the program's bytes, not necessarily UTF-8; the line must still be JSON.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

// A reason reaches the agent's terminal: control characters (an escape sequence, a fake second
// line) become spaces, and it is cut on a UTF-8 boundary.
std::string clean_reason(const std::string& in) {
  std::string out;
  out.reserve(std::min(in.size(), kMaxDeciderReason));
  for (unsigned char c : in) {
    out.push_back(c < 0x20 || c == 0x7f ? ' ' : static_cast<char>(c));
  }
  if (out.size() > kMaxDeciderReason) {
    size_t cut = kMaxDeciderReason;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) {
      --cut;  // never split a multi-byte character
    }
    out.resize(cut);
  }
  return out;
}

}  // namespace

Result<DeciderReply> parse_decider_reply(std::string_view line) {
  if (line.size() > kMaxDeciderLine) {
    return make_error("decider reply longer than " + std::to_string(kMaxDeciderLine) + " bytes");
  }
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return make_error("decider reply is not a JSON object");
  }
  if (auto v = j.find("v"); v != j.end() && !(v->is_number_integer() && *v == kDeciderProtocol)) {
    return make_error("decider reply has an unsupported \"v\" (this cordon speaks version " +
                      std::to_string(kDeciderProtocol) + ")");
  }
  DeciderReply r;
  auto id = j.find("id");
  if (id == j.end() || !id->is_number_unsigned() || id->get<uint64_t>() == 0) {
    return make_error("decider reply has no \"id\" (a positive integer)");
  }
  r.id = id->get<uint64_t>();
  auto decision = j.find("decision");
  if (decision == j.end() || !decision->is_string() ||
      (*decision != "allow" && *decision != "deny")) {
    return make_error("decider reply " + std::to_string(r.id) +
                      " has no \"decision\" of \"allow\" or \"deny\"");
  }
  r.allow = *decision == "allow";
  if (auto scope = j.find("scope"); scope != j.end()) {
    if (!scope->is_string() || (*scope != "once" && *scope != "session")) {
      return make_error("decider reply " + std::to_string(r.id) +
                        " has a \"scope\" other than \"once\" or \"session\"");
    }
    r.session = *scope == "session";
  }
  if (auto reason = j.find("reason"); reason != j.end()) {
    if (!reason->is_string()) {
      return make_error("decider reply " + std::to_string(r.id) + " has a non-string \"reason\"");
    }
    r.reason = clean_reason(reason->get<std::string>());
  }
  return r;
}

Result<DeciderQuestion> parse_decider_question(std::string_view line) {
  if (line.size() > kMaxDeciderLine) {
    return make_error("decider question longer than " + std::to_string(kMaxDeciderLine) + " bytes");
  }
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return make_error("decider question is not a JSON object");
  }
  auto v = j.find("v");
  if (v == j.end() || !(v->is_number_integer() && *v == kDeciderProtocol)) {
    return make_error("decider question is not of protocol version " +
                      std::to_string(kDeciderProtocol));
  }
  DeciderQuestion q;
  auto id = j.find("id");
  if (id == j.end() || !id->is_number_unsigned() || id->get<uint64_t>() == 0) {
    return make_error("decider question has no \"id\" (a positive integer)");
  }
  q.id = id->get<uint64_t>();
  auto port = j.find("port");
  if (port != j.end()) {
    if (!port->is_number_unsigned() || port->get<uint64_t>() > 65535) {
      return make_error("decider question " + std::to_string(q.id) + " has a bad \"port\"");
    }
    q.port = static_cast<uint16_t>(port->get<uint64_t>());
  }
  for (auto [key, out] :
       {std::pair{"kind", &q.kind}, std::pair{"host", &q.host}, std::pair{"mode", &q.mode},
        std::pair{"client", &q.client}, std::pair{"sni", &q.sni}, std::pair{"address", &q.address},
        std::pair{"method", &q.method}, std::pair{"path", &q.path}}) {
    if (auto f = j.find(key); f != j.end()) {
      if (!f->is_string()) {
        return make_error("decider question " + std::to_string(q.id) + " has a non-string \"" +
                          key + "\"");
      }
      *out = f->get<std::string>();
    }
  }
  // The process and its parents: shown to a person, so a malformed entry is dropped rather than
  // guessed at; the chain ends at the first one.
  auto process_of = [](const nlohmann::json& o) -> std::optional<SandboxProcess> {
    if (!o.is_object()) {
      return std::nullopt;
    }
    auto pid = o.find("pid");
    auto argv = o.find("argv");
    if (pid == o.end() || !pid->is_number_integer() || argv == o.end() || !argv->is_array()) {
      return std::nullopt;
    }
    SandboxProcess p;
    p.pid = pid->get<int64_t>();
    for (const auto& a : *argv) {
      if (!a.is_string() || p.argv.size() >= SandboxProcess::kMaxArgs) {
        break;
      }
      p.argv.push_back(a.get<std::string>());
    }
    if (auto exe = o.find("exe"); exe != o.end() && exe->is_string()) {
      p.exe = exe->get<std::string>();
    }
    return p;
  };
  if (auto pr = j.find("process"); pr != j.end()) {
    if (auto p = process_of(*pr)) {
      q.process.push_back(std::move(*p));
      if (auto parents = j.find("parents"); parents != j.end() && parents->is_array()) {
        for (const auto& o : *parents) {
          auto pp = process_of(o);
          if (!pp || q.process.size() >= DeciderQuestion::kMaxChain) {
            break;
          }
          q.process.push_back(std::move(*pp));
        }
      }
    }
  }
  if (q.host.empty() || (q.kind != "connect" && q.kind != "dns")) {
    return make_error("decider question " + std::to_string(q.id) +
                      " has no \"host\" or no \"kind\" of \"connect\" or \"dns\"");
  }
  return q;
}

std::string reply_line(const DeciderReply& r) {
  nlohmann::json j = {{"id", r.id},
                      {"decision", r.allow ? "allow" : "deny"},
                      {"scope", r.session ? "session" : "once"}};
  if (!r.reason.empty()) {
    j["reason"] = clean_reason(r.reason);
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

uint64_t reply_id_hint(std::string_view line) {
  if (line.size() > kMaxDeciderLine) {
    return 0;
  }
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_object()) {
    if (auto id = j.find("id"); id != j.end() && id->is_number_unsigned()) {
      return id->get<uint64_t>();
    }
  }
  return 0;
}

}  // namespace cordon::netproxy
