// Substituting network.credentials' values and refusing their placeholders elsewhere.
#include "netproxy/credentials.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "netproxy/body_guard.h"
#include "netproxy/body_scan.h"

namespace cordon::netproxy {
namespace {

// Replaces every `from` in `s` by `to` (same length); whether any was.
bool replace_all(std::string& s, std::string_view from, std::string_view to) {
  bool any = false;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
    any = true;
  }
  return any;
}

std::string lowercase(std::string_view in) {
  std::string out(in);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The first form of a secret not bound to the request's host (`bound`, one entry per secret)
// in its target, a field's name or a field's value, scanned in every encoding a body is, and
// where it sits ("url", "header <name>").
struct HeadHit {
  SecretHit hit;
  std::string channel;
};
std::optional<HeadHit> secret_in_head(const BodyScanner& scanner, const std::vector<bool>& bound,
                                      const http::request<http::buffer_body>& req) {
  if (auto hit = find_secret(scanner, req.target(), bound)) {
    return HeadHit{std::move(*hit), "url"};
  }
  for (const auto& f : req) {
    auto hit = find_secret(scanner, f.value(), bound);
    if (!hit) {
      hit = find_secret(scanner, f.name_string(), bound);
    }
    if (hit) {
      // Lowercased: a field name's case is the client's choice, the event's channel is not.
      return HeadHit{std::move(*hit), "header " + lowercase(f.name_string())};
    }
  }
  return std::nullopt;
}

std::string hosts_of(const policy::Credential& c) {
  std::string hosts;
  for (const auto& h : c.hosts) {
    hosts += (hosts.empty() ? "" : ", ") + h.text;
  }
  return hosts;
}

}  // namespace

Status load_secrets(Context& ctx, std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) {
    return make_error("--credentials-fd: not a JSON array of {env, placeholder, value}");
  }
  for (const auto& c : ctx.policy.credentials) {
    const nlohmann::json* found = nullptr;
    for (const auto& e : j) {
      if (e.is_object() && e.value("env", "") == c.env) {
        found = &e;
      }
    }
    const std::string placeholder = found ? found->value("placeholder", "") : "";
    const std::string value = found ? found->value("value", "") : "";
    if (placeholder.empty() || placeholder.size() != value.size() || placeholder == value) {
      return make_error(
          "network.credentials: no usable secret for " + c.env + " in --credentials-fd",
          "run through cordon run, which hands each credential over");
    }
    ctx.secrets.push_back({&c, placeholder, value});
  }
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("canary")) {
      continue;
    }
    const std::string name = e.value("canary", ""), value = e.value("value", "");
    if (name.empty() || value.size() < 16) {
      return make_error("--credentials-fd: a canary without a name or a value of 16 bytes");
    }
    ctx.secrets.push_back({nullptr, value, "", name});
  }
  if (!ctx.secrets.empty()) {
    std::vector<std::string> forms;
    for (const Secret& s : ctx.secrets) {
      forms.push_back(s.placeholder);
    }
    ctx.scanner = std::make_shared<const BodyScanner>(forms);
  }
  if (j.size() != ctx.secrets.size()) {
    return make_error("--credentials-fd names a secret network.credentials does not");
  }
  return {};
}

RuleRefusal refuse_exfil(Context& ctx, const RequestSite& at, const Secret& s,
                         const std::string& channel, const std::string& encoding) {
  const std::string head = "cordon: " + std::string(at.method) + " to " + std::string(at.name) +
                           " refused: its " + channel +
                           (encoding.empty() ? "" : " (" + encoding + ")") + " carries ";
  RuleRefusal refusal{
      http::status::forbidden,
      s.cred == nullptr
          ? head + "the " + s.canary + " canary, a decoy secret that goes nowhere (canaries)"
          : head + "the placeholder of credential " + s.cred->env + ", which goes only to " +
                hosts_of(*s.cred) + " (network.credentials)"};
  nlohmann::json fields = {
      {"name", at.name},       {"port", at.port},
      {"channel", channel},    {"mode", at.mode},
      {"client", at.client},   {"method", at.method},
      {"url", at.url},         {"rule", s.cred == nullptr ? "canaries" : "network.credentials"},
      {"reason", refusal.line}};
  if (!encoding.empty()) {
    fields["encoding"] = encoding;
  }
  if (s.cred == nullptr) {
    fields["canary"] = s.canary;
  } else {
    fields["credential"] = s.cred->env;
  }
  ctx.emit("net.exfil", std::move(fields));
  if (ctx.exfil_alarm_fd >= 0) {
    // network.on_exfil: kill: cordon ends the session on this byte, the event above recorded.
    (void)!::write(ctx.exfil_alarm_fd, "x", 1);
  }
  return refusal;
}

bool substitutes(const Secret& s, const RequestSite& at) {
  if (!s.bound_to(at.name, at.port)) {
    return false;
  }
  const bool plain = at.mode == "http" || at.mode == "transparent";
  return !plain || s.cred->plain_http;
}

std::optional<RuleRefusal> apply_credentials_to_trailers(Context& ctx, const RequestSite& at,
                                                         Trailers& fields) {
  std::vector<bool> is_bound(ctx.secrets.size(), false);
  std::vector<const Secret*> bound;
  for (size_t i = 0; i < ctx.secrets.size(); ++i) {
    is_bound[i] = ctx.secrets[i].bound_to(at.name, at.port);
    if (substitutes(ctx.secrets[i], at)) {
      bound.push_back(&ctx.secrets[i]);
    }
  }
  if (ctx.scanner) {
    for (const auto& [name, value] : fields) {
      auto hit = find_secret(*ctx.scanner, value, is_bound);
      if (!hit) {
        hit = find_secret(*ctx.scanner, name, is_bound);
      }
      if (hit) {
        return refuse_exfil(ctx, at, ctx.secrets[hit->secret], "trailer " + lowercase(name),
                            hit->encoding);
      }
    }
  }
  for (auto& field : fields) {
    for (const Secret* s : bound) {
      replace_all(field.second, s->placeholder, s->value);
    }
  }
  return std::nullopt;
}

std::optional<RuleRefusal> apply_credentials(Context& ctx, const RequestSite& at,
                                             http::request<http::buffer_body>& req) {
  // Every request of every connection passes here: each secret's binding is decided once. A
  // secret bound here is never refused; its value goes in only where it `substitutes`.
  std::vector<const Secret*> bound;
  std::vector<bool> is_bound(ctx.secrets.size(), false);
  for (size_t i = 0; i < ctx.secrets.size(); ++i) {
    is_bound[i] = ctx.secrets[i].bound_to(at.name, at.port);
    if (substitutes(ctx.secrets[i], at)) {
      bound.push_back(&ctx.secrets[i]);
    }
  }
  if (ctx.scanner) {
    if (auto found = secret_in_head(*ctx.scanner, is_bound, req)) {
      return refuse_exfil(ctx, at, ctx.secrets[found->hit.secret], found->channel,
                          found->hit.encoding);
    }
  }
  if (bound.empty()) {
    return std::nullopt;  // nothing to put in: the request is not rebuilt
  }
  std::vector<std::pair<std::string, std::string>> fields;
  bool changed = false;
  std::string target(req.target());
  for (const Secret* s : bound) {
    changed |= replace_all(target, s->placeholder, s->value);
  }
  for (const auto& f : req) {
    std::string v(f.value());
    for (const Secret* s : bound) {
      changed |= replace_all(v, s->placeholder, s->value);
    }
    fields.emplace_back(std::string(f.name_string()), std::move(v));
  }
  if (changed) {
    req.target(target);
    // Rebuilt in order, so repeated fields (Cookie, ...) keep theirs.
    for (auto it = req.begin(); it != req.end();) {
      it = req.erase(it);
    }
    for (auto& [name, value] : fields) {
      req.insert(name, value);
    }
  }
  for (const Secret* s : bound) {
    if (!s->cred->header.empty()) {
      const size_t colon = s->cred->header.find(':');
      std::string value = s->cred->header.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      replace_all(value, "{}", s->value);
      req.set(s->cred->header.substr(0, colon), value);
    }
  }
  return std::nullopt;
}

std::optional<RuleRefusal> apply_credentials_to_body(Context& ctx, const RequestSite& at,
                                                     char* body, size_t size) {
  BodyGuard guard(ctx, at);
  const auto out = guard.pass(std::string_view(body, size), true);
  if (!out) {
    return guard.refusal();
  }
  std::copy(out->begin(), out->end(), body);  // the same bytes, bound placeholders replaced
  return std::nullopt;
}

}  // namespace cordon::netproxy
