// The body scanner's automaton (Aho-Corasick over the secrets' forms) and a body's scan state.
#include "netproxy/body_scan.h"

#include <algorithm>
#include <deque>

namespace cordon::netproxy {
namespace {

std::string hex_of(std::string_view s, const char* digits) {
  std::string out;
  out.reserve(2 * s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Base64 of `s` (a multiple of 3 bytes long: no padding).
std::string base64_of(std::string_view s, bool url) {
  const char* a = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                      : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i + 3 <= s.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(s[i])) << 16 |
                       static_cast<uint32_t>(static_cast<unsigned char>(s[i + 1])) << 8 |
                       static_cast<unsigned char>(s[i + 2]);
    out += a[v >> 18 & 63];
    out += a[v >> 12 & 63];
    out += a[v >> 6 & 63];
    out += a[v & 63];
  }
  return out;
}

// Base32 of `s` (a multiple of 5 bytes long: no padding) in the RFC 4648 alphabet.
std::string base32_of(std::string_view s, bool lower) {
  const char* a = lower ? "abcdefghijklmnopqrstuvwxyz234567" : "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  std::string out;
  for (size_t i = 0; i + 5 <= s.size(); i += 5) {
    uint64_t v = 0;
    for (size_t j = 0; j < 5; ++j) {
      v = v << 8 | static_cast<unsigned char>(s[i + j]);
    }
    for (int shift = 35; shift >= 0; shift -= 5) {
      out += a[v >> shift & 31];
    }
  }
  return out;
}

}  // namespace

BodyScanner::BodyScanner(const std::vector<std::string>& secrets) {
  std::vector<std::string> texts;
  auto add = [&](uint32_t secret, SecretForm form, std::string text) {
    if (text.empty()) {
      return;
    }
    patterns_.push_back({secret, form, static_cast<uint32_t>(text.size())});
    longest_ = std::max(longest_, text.size());
    texts.push_back(std::move(text));
  };
  for (uint32_t i = 0; i < secrets.size(); ++i) {
    const std::string_view s = secrets[i];
    add(i, SecretForm::Raw, std::string(s));
    std::string lowered(s);
    for (char& ch : lowered) {
      ch = ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch;
    }
    if (lowered != s && s.size() >= 12) {
      add(i, SecretForm::RawLower, std::move(lowered));
    }
    add(i, SecretForm::HexLower, hex_of(s, "0123456789abcdef"));
    add(i, SecretForm::HexUpper, hex_of(s, "0123456789ABCDEF"));
    // The secret starts at one of three offsets within a 3-byte group of whatever was encoded;
    // from its first whole group on, the base64 characters depend on its bytes only.
    for (size_t k = 0; k < 3 && k < s.size(); ++k) {
      const std::string_view whole = s.substr(k, (s.size() - k) / 3 * 3);
      add(i, SecretForm::Base64, base64_of(whole, false));
      add(i, SecretForm::Base64Url, base64_of(whole, true));
    }
    // Base32 the same way, over 5-byte groups: the encoding DNS labels can carry whatever their
    // case (lower case is what a name comes to once case is dropped).
    // Forms under 16 characters (a secret under 14 bytes) are left out: 32^-8 per place would
    // make false alarms on long bodies a matter of time.
    for (size_t k = 0; k < 5 && k < s.size(); ++k) {
      const std::string_view whole = s.substr(k, (s.size() - k) / 5 * 5);
      if (whole.size() < 10) {
        continue;
      }
      add(i, SecretForm::Base32Lower, base32_of(whole, true));
      add(i, SecretForm::Base32Upper, base32_of(whole, false));
    }
  }
  // Byte classes: only the bytes some pattern holds need a column of their own.
  for (const auto& t : texts) {
    for (const char ch : t) {
      auto& cls = class_of_[static_cast<unsigned char>(ch)];
      if (cls == 0) {
        cls = static_cast<uint16_t>(classes_++);
      }
    }
  }
  // The trie (0 in next_ means "no edge" while building: the root is never a child).
  next_.assign(classes_, 0);
  depth_.assign(1, 0);
  std::vector<std::vector<uint32_t>> outs(1);
  for (uint32_t p = 0; p < texts.size(); ++p) {
    uint32_t s = 0;
    for (const char ch : texts[p]) {
      const uint32_t c = class_of_[static_cast<unsigned char>(ch)];
      if (next_[s * classes_ + c] == 0) {
        next_[s * classes_ + c] = static_cast<uint32_t>(depth_.size());
        depth_.push_back(depth_[s] + 1);
        next_.resize(next_.size() + classes_, 0);
        outs.emplace_back();
      }
      s = next_[s * classes_ + c];
    }
    outs[s].push_back(p);
  }
  // Failure links, breadth first, folded into the table so a step is one look-up.
  std::vector<uint32_t> fail(depth_.size(), 0);
  std::deque<uint32_t> queue;
  for (uint32_t c = 0; c < classes_; ++c) {
    if (const uint32_t t = next_[c]; t != 0) {
      queue.push_back(t);
    }
  }
  while (!queue.empty()) {
    const uint32_t s = queue.front();
    queue.pop_front();
    for (const uint32_t p : outs[fail[s]]) {
      outs[s].push_back(p);
    }
    for (uint32_t c = 0; c < classes_; ++c) {
      uint32_t& t = next_[s * classes_ + c];
      const uint32_t via_fail = next_[fail[s] * classes_ + c];
      if (t == 0) {
        t = via_fail;
      } else {
        fail[t] = via_fail;
        queue.push_back(t);
      }
    }
  }
  // States where patterns end are numbered last, so the hot loop tells them by a compare that
  // is not on its chain of dependent loads.
  const uint32_t n = static_cast<uint32_t>(depth_.size());
  std::vector<uint32_t> order, id(n);
  for (int with_out = 0; with_out < 2; ++with_out) {
    if (with_out == 1) {
      out_row_ = static_cast<uint32_t>(order.size()) * classes_;
    }
    for (uint32_t s = 0; s < n; ++s) {
      if (outs[s].empty() == (with_out == 0)) {
        id[s] = static_cast<uint32_t>(order.size());
        order.push_back(s);
      }
    }
  }
  std::vector<uint32_t> next(next_.size()), depth(n);
  rows_.resize(next_.size());
  out_at_.reserve(n + 1);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t c = 0; c < classes_; ++c) {
      next[i * classes_ + c] = id[next_[order[i] * classes_ + c]];
      rows_[i * classes_ + c] = next[i * classes_ + c] * classes_;
    }
    depth[i] = depth_[order[i]];
    out_at_.push_back(static_cast<uint32_t>(out_.size()));
    out_.insert(out_.end(), outs[order[i]].begin(), outs[order[i]].end());
  }
  out_at_.push_back(static_cast<uint32_t>(out_.size()));
  next_ = std::move(next);
  depth_ = std::move(depth);
  special_[static_cast<unsigned char>('%')] = true;
  special_[static_cast<unsigned char>('\r')] = true;
  special_[static_cast<unsigned char>('\n')] = true;
}

BodyScan::BodyScan(const BodyScanner& scanner) : sc_(scanner) {
  size_t ring = 1;
  while (ring <= scanner.longest()) {
    ring *= 2;
  }
  mask_ = ring - 1;
  nolf_.start.assign(ring, 0);
  pct_.start.assign(ring, 0);
}

void BodyScan::unsync(Derived& d, uint32_t raw_state) {
  // Until now the stream saw exactly the raw bytes: its prefix is the raw stream's last bytes.
  d.synced = false;
  d.state = raw_state;
  const uint32_t depth = sc_.depth_[raw_state];
  for (uint32_t j = 0; j < depth; ++j) {
    d.start[(d.emitted + j) & mask_] = pos_ - depth + j;
  }
  d.emitted += depth;
}

void BodyScan::emit(Derived& d, unsigned char c, uint64_t began) {
  d.state = sc_.step(d.state, c);
  d.start[d.emitted & mask_] = began;
  ++d.emitted;
}

uint64_t BodyScan::prefix_start(const Derived& d) const {
  const uint32_t depth = sc_.depth_[d.state];
  return depth == 0 ? pos_ : d.start[(d.emitted - depth) & mask_];
}

uint64_t BodyScan::safe_end() const {
  uint64_t end = pos_ - sc_.depth_[raw_];
  if (!nolf_.synced) {
    end = std::min(end, prefix_start(nolf_));
  }
  if (!pct_.synced) {
    end = std::min(end, prefix_start(pct_));
    if (pct_have_ != 0) {
      end = std::min(end, pct_began_);
    }
  }
  return end;
}

std::string encoding_of(const BodyScan::Match& m) {
  std::string form;
  switch (m.form) {
    case SecretForm::Raw:
      break;
    case SecretForm::RawLower:
      form = "lower-case";
      break;
    case SecretForm::HexLower:
    case SecretForm::HexUpper:
      form = "hex";
      break;
    case SecretForm::Base64:
      form = "base64";
      break;
    case SecretForm::Base64Url:
      form = "base64url";
      break;
    case SecretForm::Base32Lower:
    case SecretForm::Base32Upper:
      form = "base32";
      break;
  }
  if (m.stream == BodyScan::Stream::PercentDecoded) {
    return form.empty() ? "url-encoded" : "url-encoded " + form;
  }
  if (m.stream == BodyScan::Stream::NoLineBreaks) {
    return form.empty() ? "line-broken" : "line-broken " + form;
  }
  return form;
}

std::optional<SecretHit> find_secret(const BodyScanner& scanner, std::string_view text,
                                     const std::vector<bool>& skip) {
  std::optional<SecretHit> hit;
  BodyScan scan(scanner);
  scan.feed(text, [&](const BodyScan::Match& m) {
    if (m.secret < skip.size() && skip[m.secret]) {
      return true;
    }
    hit = SecretHit{m.secret, encoding_of(m)};
    return false;
  });
  return hit;
}

std::string name_letters(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (const char ch : name) {
    if (ch != '.') {
      out += ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch;
    }
  }
  return out;
}

std::optional<SecretHit> find_secret_in_name(const BodyScanner& scanner, std::string_view name) {
  if (auto hit = find_secret(scanner, name_letters(name))) {
    return hit;
  }
  std::string as_sent;
  as_sent.reserve(name.size());
  for (const char ch : name) {
    if (ch != '.') {
      as_sent += ch;
    }
  }
  return find_secret(scanner, as_sent);
}

}  // namespace cordon::netproxy
