// A request body on its way upstream, held back just long enough to be judged for secrets.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "netproxy/body_scan.h"
#include "netproxy/credentials.h"

namespace cordon::netproxy {

// One request body toward `at` (needs ctx.scanner: secrets in the policy). Each piece goes
// through pass() before the relay writes it; what comes back may be forwarded. A byte is held
// back while it could still begin some secret's form (at most ~3 x the longest form, whatever the
// body's size), so no part of a form that is later completed ever leaves. A form of a secret not
// bound to `at` ends the body: the refusal (403 with its line) is set and the net.exfil event
// written. A bound credential's placeholder, as sent, is replaced by its value (same length)
// where it `substitutes` (credentials.h); elsewhere toward its host it passes as it is.
class BodyGuard {
 public:
  BodyGuard(Context& ctx, const RequestSite& at);

  // Takes the next piece of body (`last`: the body ends with it) and returns the bytes that may
  // be forwarded now, valid until the next call; nullopt once refused.
  std::optional<std::string_view> pass(std::string_view piece, bool last);
  // Takes the body's trailer fields, after its last piece: judged as header fields are
  // (apply_credentials_to_trailers); false once refused.
  bool pass_trailers(Trailers& fields);
  const std::optional<RuleRefusal>& refusal() const { return refusal_; }

 private:
  Context& ctx_;
  std::string name_, client_, method_, url_, mode_;
  uint16_t port_;
  std::vector<bool> bound_;       // per ctx.secrets entry: bound to `at` (never refused there)
  std::vector<bool> substitute_;  // per ctx.secrets entry: its value goes in (substitutes)
  BodyScan scan_;
  std::string held_;      // the body from held_at_ on, not yet forwarded
  uint64_t held_at_ = 0;  // body offset of held_[0]
  size_t given_ = 0;      // bytes of held_ the last pass() handed out: dropped on the next
  std::optional<RuleRefusal> refusal_;
};

// A refusal for a secret's form where it may not go, and the secret (its rule: canaries or
// network.credentials).
struct ExfilRefusal {
  RuleRefusal refusal;
  const Secret* secret;
  const char* rule() const { return secret->cred == nullptr ? "canaries" : "network.credentials"; }
};

// A name the sandbox asked for (DNS query, CONNECT or SOCKS5 target, TLS SNI, Host) that carries a
// form of a secret (find_secret_in_name): the refusal, and the net.exfil event with `channel`,
// toward whatever host (no name is a credential's own carrier); nullopt when it carries none.
std::optional<ExfilRefusal> refuse_secret_in_name(Context& ctx, const RequestSite& at,
                                                  std::string_view name,
                                                  const std::string& channel);

// The bytes of a stream's first flight (peeked before any of it is relayed) that carry a form of
// a secret not bound to `at`: the refusal and net.exfil event (channel "stream").
std::optional<ExfilRefusal> refuse_secret_in_stream(Context& ctx, const RequestSite& at,
                                                    std::string_view bytes);

}  // namespace cordon::netproxy
