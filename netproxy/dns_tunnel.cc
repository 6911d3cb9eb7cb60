// The shape checks: lengths first, then the letter/digit mix and entropy of long labels.
#include "netproxy/dns_tunnel.h"

#include <cctype>
#include <cmath>

namespace cordon::netproxy {

namespace {

double entropy_bits(std::string_view s) {
  int counts[256] = {};
  for (unsigned char c : s) {
    ++counts[std::tolower(c)];
  }
  double bits = 0;
  for (int n : counts) {
    if (n > 0) {
      const double p = static_cast<double>(n) / static_cast<double>(s.size());
      bits -= p * std::log2(p);
    }
  }
  return bits;
}

}  // namespace

std::optional<std::string> tunnel_shaped(std::string_view name) {
  if (name.size() > kMaxLearnName) {
    return "a name of " + std::to_string(name.size()) + " characters (more than " +
           std::to_string(kMaxLearnName) + ")";
  }
  for (size_t at = 0; at <= name.size();) {
    size_t dot = name.find('.', at);
    std::string_view label = name.substr(at, dot == std::string_view::npos ? dot : dot - at);
    at = dot == std::string_view::npos ? name.size() + 1 : dot + 1;
    if (label.size() > kMaxLearnLabel) {
      return "a label of " + std::to_string(label.size()) + " characters (more than " +
             std::to_string(kMaxLearnLabel) + ")";
    }
    if (label.size() < kMinEncodedLabel) {
      continue;
    }
    bool letters = false, digits = false;
    for (unsigned char c : label) {
      letters |= std::isalpha(c) != 0;
      digits |= std::isdigit(c) != 0;
    }
    if (letters && digits && entropy_bits(label) >= kEncodedEntropy) {
      return "a label that reads as encoded data (" + std::to_string(label.size()) +
             " mixed letters and digits)";
    }
  }
  return std::nullopt;
}

}  // namespace cordon::netproxy
