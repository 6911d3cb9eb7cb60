// Judging a streamed request body: hold back what may start a secret, refuse or substitute.
#include "netproxy/body_guard.h"

#include <algorithm>

namespace cordon::netproxy {

BodyGuard::BodyGuard(Context& ctx, const RequestSite& at)
    : ctx_(ctx),
      name_(at.name),
      client_(at.client),
      method_(at.method),
      url_(at.url),
      mode_(at.mode),
      port_(at.port),
      scan_(*ctx.scanner) {
  bound_.reserve(ctx.secrets.size());
  substitute_.reserve(ctx.secrets.size());
  for (const Secret& s : ctx.secrets) {
    bound_.push_back(s.bound_to(at.name, at.port));
    substitute_.push_back(substitutes(s, at));
  }
}

bool BodyGuard::pass_trailers(Trailers& fields) {
  if (refusal_) {
    return false;
  }
  const RequestSite at{name_, port_, client_, method_, url_, mode_};
  refusal_ = apply_credentials_to_trailers(ctx_, at, fields);
  return !refusal_;
}

std::optional<std::string_view> BodyGuard::pass(std::string_view piece, bool last) {
  if (refusal_) {
    return std::nullopt;
  }
  held_.erase(0, given_);
  held_at_ += given_;
  given_ = 0;
  held_.append(piece);
  scan_.feed(piece, [&](const BodyScan::Match& m) {
    const Secret& s = ctx_.secrets[m.secret];
    if (!bound_[m.secret]) {
      const RequestSite at{name_, port_, client_, method_, url_, mode_};
      refusal_ = refuse_exfil(ctx_, at, s, "body", encoding_of(m));
      return false;
    }
    // Toward its own host only the placeholder as sent is replaced (an encoded one passes as
    // it is: the value is never encoded by us). Every byte of it is still held: a byte is
    // handed out only once no form can start at or before it.
    if (substitute_[m.secret] && m.form == SecretForm::Raw &&
        m.stream == BodyScan::Stream::AsSent && m.raw_end - m.length >= held_at_) {
      std::copy(s.value.begin(), s.value.end(), held_.begin() + (m.raw_end - m.length - held_at_));
    }
    return true;
  });
  if (refusal_) {
    held_.clear();
    return std::nullopt;
  }
  given_ = last ? held_.size() : static_cast<size_t>(scan_.safe_end() - held_at_);
  return std::string_view(held_.data(), given_);
}

std::optional<ExfilRefusal> refuse_secret_in_name(Context& ctx, const RequestSite& at,
                                                  std::string_view name,
                                                  const std::string& channel) {
  if (!ctx.scanner) {
    return std::nullopt;
  }
  auto hit = find_secret_in_name(*ctx.scanner, name);
  if (!hit) {
    return std::nullopt;
  }
  const Secret& s = ctx.secrets[hit->secret];
  return ExfilRefusal{refuse_exfil(ctx, at, s, channel, hit->encoding), &s};
}

std::optional<ExfilRefusal> refuse_secret_in_stream(Context& ctx, const RequestSite& at,
                                                    std::string_view bytes) {
  if (!ctx.scanner) {
    return std::nullopt;
  }
  std::vector<bool> bound;
  bound.reserve(ctx.secrets.size());
  for (const Secret& s : ctx.secrets) {
    bound.push_back(s.bound_to(at.name, at.port));
  }
  auto hit = find_secret(*ctx.scanner, bytes, bound);
  if (!hit) {
    return std::nullopt;
  }
  const Secret& s = ctx.secrets[hit->secret];
  return ExfilRefusal{refuse_exfil(ctx, at, s, "stream", hit->encoding), &s};
}

}  // namespace cordon::netproxy
