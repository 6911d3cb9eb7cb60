// Streaming search of request bodies for the session's secrets and their common encodings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::netproxy {

// How a secret was written where it was found.
enum class SecretForm : uint8_t {
  Raw,       // the bytes themselves
  RawLower,  // the bytes with A-Z lowered, for a secret that has capitals (what a DNS name
             // carrying it becomes once a resolver or the stub dropped its case)
  HexLower,  // each byte as two hex digits
  HexUpper,
  Base64,       // standard alphabet, at any of the three byte alignments, padding not needed
  Base64Url,    // the same with '-' and '_'
  Base32Lower,  // RFC 4648 alphabet (a-z, 2-7), at any of the five byte alignments, no padding
  Base32Upper,
};

// The automaton for one session's secrets (Aho-Corasick over every form of every secret): built
// once, then shared read-only by every body's BodyScan. For each secret the patterns are its raw
// bytes (and lowered, when it has capitals and 12 bytes or more), hex in lower and upper case, the
// part of its base64 (standard and URL alphabets) that does not depend on the bytes around it, for
// each of the three alignments it can start at, and the same for base32 (lower and upper case, five
// alignments; none under 16 characters).
class BodyScanner {
 public:
  explicit BodyScanner(const std::vector<std::string>& secrets);

  struct Pattern {
    uint32_t secret;  // index into the constructor's vector
    SecretForm form;
    uint32_t length;
  };
  const std::vector<Pattern>& patterns() const { return patterns_; }
  // The longest pattern, in bytes: a BodyScan holds back at most about three times this.
  size_t longest() const { return longest_; }
  size_t states() const { return depth_.size(); }

 private:
  friend class BodyScan;
  uint32_t step(uint32_t state, unsigned char byte) const {
    return next_[state * classes_ + class_of_[byte]];
  }

  std::vector<Pattern> patterns_;
  size_t longest_ = 0;
  uint32_t classes_ = 1;  // byte classes: 0 is every byte no pattern holds
  uint16_t class_of_[256] = {};
  std::vector<uint32_t> next_;  // states x classes, failure links already folded in
  // The same table for the hot loop: each entry is the next state's row (state x classes), so a
  // step is one add and one load. Rows from out_row_ on are the states where patterns end.
  std::vector<uint32_t> rows_;
  uint32_t out_row_ = 0;
  bool special_[256] = {};  // '%', CR, LF: the bytes where the derived streams part from the raw
  std::vector<uint32_t> depth_;  // length of the pattern prefix each state stands for
  // The patterns ending at each state (its own and its suffixes'): out_[out_at_[s]..out_at_[s+1]).
  std::vector<uint32_t> out_at_, out_;
};

// One body's scan: the scanner's automaton run over the bytes as sent, over the bytes with CR and
// LF dropped (base64 wrapped in MIME lines; a run of more than two breaks the stream), and over
// the bytes with %XX escapes decoded ('+' is kept as '+'). State carries across feed() calls, so
// a secret split across chunks, TLS records or reads is found. Memory is fixed at construction
// (O(longest pattern)), whatever the body's size.
class BodyScan {
 public:
  explicit BodyScan(const BodyScanner& scanner);

  // Which of the three streams a match was found in.
  enum class Stream : uint8_t { AsSent, NoLineBreaks, PercentDecoded };
  struct Match {
    uint32_t secret;
    SecretForm form;
    Stream stream;
    // For a match in the bytes as sent: the offset (from the body's start) one past its last
    // byte, so the match is [raw_end - length, raw_end). 0 for matches in a derived stream.
    uint64_t raw_end;
    uint32_t length;
  };

  // Scans the next `data` bytes of the body; `on_match(const Match&)` is called for each match,
  // in order. Returns false as soon as on_match returns false (the rest of `data` is not scanned).
  template <class F>
  bool feed(std::string_view data, F&& on_match);

  // The body offset before which no byte can become part of a match, whatever follows: bytes
  // before it may be forwarded. At most ~3 x longest() + 2 behind scanned().
  uint64_t safe_end() const;
  uint64_t scanned() const { return pos_; }

 private:
  // A stream derived from the bytes as sent. While `synced`, it has seen the same bytes as the raw
  // stream for as long as the automaton remembers, so it is the raw stream's state and is not
  // stepped at all (the common case costs one table look-up per byte).
  struct Derived {
    bool synced = true;
    uint32_t state = 0;
    uint64_t emitted = 0;
    std::vector<uint64_t> start;  // ring: body offset where each emitted byte began
  };
  void unsync(Derived& d, uint32_t raw_state);
  void emit(Derived& d, unsigned char c, uint64_t began);
  template <class F>
  bool report(uint32_t state, Stream stream, F& on_match);
  // One byte where something happens: a match as sent, or a derived stream apart or parting.
  // raw_ is the state after `c`, `before` the one before, pos_ the offset of `c`.
  template <class F>
  bool step_slow(unsigned char c, uint32_t before, bool raw_out, F& on_match);
  uint64_t prefix_start(const Derived& d) const;

  const BodyScanner& sc_;
  uint64_t pos_ = 0;
  uint32_t raw_ = 0;
  Derived nolf_, pct_;
  bool synced_ = true;  // both derived streams are
  uint8_t crlf_run_ = 0;
  uint8_t pct_have_ = 0;  // 0, or 1/2 after '%' / '%X'
  uint8_t pct_hi_ = 0;
  uint64_t pct_began_ = 0;
  uint64_t mask_ = 0;
};

template <class F>
bool BodyScan::report(uint32_t state, Stream stream, F& on_match) {
  for (uint32_t i = sc_.out_at_[state]; i < sc_.out_at_[state + 1]; ++i) {
    const auto& p = sc_.patterns_[sc_.out_[i]];
    const uint64_t end = stream == Stream::AsSent ? pos_ + 1 : 0;
    if (!on_match(Match{p.secret, p.form, stream, end, p.length})) {
      return false;
    }
  }
  return true;
}

template <class F>
bool BodyScan::feed(std::string_view data, F&& on_match) {
  const uint32_t* rows = sc_.rows_.data();
  const uint32_t out_row = sc_.out_row_;
  const uint16_t* cls = sc_.class_of_;
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  const uint64_t first = pos_;
  uint32_t row = raw_ * sc_.classes_;
  for (size_t i = 0; i < data.size(); ++i) {
    const unsigned char c = bytes[i];
    const uint32_t before = row;
    row = rows[row + cls[c]];
    if (row < out_row && synced_ && !sc_.special_[c]) {
      continue;  // the common case: nothing ends here, the derived streams are the raw one
    }
    raw_ = row / sc_.classes_;
    pos_ = first + i;
    if (!step_slow(c, before / sc_.classes_, row >= out_row, on_match)) {
      return false;
    }
  }
  raw_ = row / sc_.classes_;
  pos_ = first + data.size();
  return true;
}

template <class F>
bool BodyScan::step_slow(unsigned char c, uint32_t before, bool raw_out, F& on_match) {
  if (raw_out && !report(raw_, Stream::AsSent, on_match)) {
    return false;
  }
  // CR/LF-free stream.
  if (c == '\r' || c == '\n') {
    if (nolf_.synced) {
      unsync(nolf_, before);
    }
    if (++crlf_run_ > 2) {
      nolf_.state = 0;  // not a MIME line break: the stream starts over
      crlf_run_ = 2;
    }
  } else {
    crlf_run_ = 0;
    if (!nolf_.synced) {
      emit(nolf_, c, pos_);
      if (sc_.out_at_[nolf_.state] != sc_.out_at_[nolf_.state + 1] &&
          !report(nolf_.state, Stream::NoLineBreaks, on_match)) {
        return false;
      }
    }
  }
  // Percent-decoded stream.
  if (!pct_.synced || c == '%') {
    if (pct_.synced) {
      unsync(pct_, before);
    }
    auto hex = [](unsigned char x) -> int {
      return x >= '0' && x <= '9'   ? x - '0'
             : x >= 'a' && x <= 'f' ? x - 'a' + 10
             : x >= 'A' && x <= 'F' ? x - 'A' + 10
                                    : -1;
    };
    auto put = [&](unsigned char out, uint64_t began) {
      emit(pct_, out, began);
      return sc_.out_at_[pct_.state] == sc_.out_at_[pct_.state + 1] ||
             report(pct_.state, Stream::PercentDecoded, on_match);
    };
    bool go = true;
    if (pct_have_ == 0) {
      if (c == '%') {
        pct_have_ = 1;
        pct_began_ = pos_;
      } else {
        go = put(c, pos_);
      }
    } else if (hex(c) < 0) {
      // A broken escape: its bytes stand for themselves.
      go = put('%', pct_began_);
      if (go && pct_have_ == 2) {
        go = put(pct_hi_, pct_began_ + 1);
      }
      pct_have_ = 0;
      if (go && c == '%') {
        pct_have_ = 1;
        pct_began_ = pos_;
      } else if (go) {
        go = put(c, pos_);
      }
    } else if (pct_have_ == 1) {
      pct_hi_ = c;
      pct_have_ = 2;
    } else {
      pct_have_ = 0;
      go = put(static_cast<unsigned char>(hex(pct_hi_) * 16 + hex(c)), pct_began_);
    }
    if (!go) {
      return false;
    }
  }
  ++pos_;
  // Back in step with the raw stream: nothing pending and the same prefix at the same place.
  if (!nolf_.synced && crlf_run_ == 0 && nolf_.state == raw_ &&
      prefix_start(nolf_) == pos_ - sc_.depth_[raw_]) {
    nolf_.synced = true;
  }
  if (!pct_.synced && pct_have_ == 0 && pct_.state == raw_ &&
      prefix_start(pct_) == pos_ - sc_.depth_[raw_]) {
    pct_.synced = true;
  }
  synced_ = nolf_.synced && pct_.synced;
  return true;
}

// How events name a match's form: "" (as sent), "hex", "base64", "base64url" or "base32", after
// "url-encoded " / "line-broken " for a match in one of BodyScan's derived streams.
std::string encoding_of(const BodyScan::Match& m);

// A secret's form found in a short piece of a request (a URL, a header value, a name).
struct SecretHit {
  uint32_t secret;       // index into the scanner's secrets
  std::string encoding;  // as encoding_of
};

// The first form, in `text` scanned whole as a body is (all three streams), of a secret whose
// `skip` entry is not set (`skip` empty, or one entry per secret).
std::optional<SecretHit> find_secret(const BodyScanner& scanner, std::string_view text,
                                     const std::vector<bool>& skip = {});

// A DNS name (or TLS SNI, or Host) as a carrier: its labels joined without the dots and
// lower-cased, since the case of a name does not survive resolvers (DNS is case-insensitive and
// some resolvers randomise it). An escaped or empty label is kept as its bytes.
std::string name_letters(std::string_view name);

// A secret's form in a name: in name_letters(name) (hex and base32 in lower case, and a raw
// secret that is lower case), then in the labels joined as sent (every form, for a client that
// kept the case: base64 and a mixed-case raw secret are found only this way).
std::optional<SecretHit> find_secret_in_name(const BodyScanner& scanner, std::string_view name);

}  // namespace cordon::netproxy
