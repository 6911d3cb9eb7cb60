// Fills the embedded template: CSP hashes, style, data, script.
#include "launcher/commands/report/page.h"

#include <openssl/evp.h>

#include <stdexcept>

#include "launcher/commands/report/page_assets.h"  // generated from page.html, page.css, page.js

namespace cordon::launcher::report {
namespace {

// 'sha256-BASE64' of `text`, as a CSP source expression.
std::string csp_hash(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(text.data(), text.size(), md, &n, EVP_sha256(), nullptr) != 1) {
    return "'none'";  // fails closed: the page then shows nothing rather than running unhashed
  }
  unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  int len = EVP_EncodeBlock(b64, md, static_cast<int>(n));
  return "'sha256-" + std::string(reinterpret_cast<char*>(b64), static_cast<size_t>(len)) + "'";
}

}  // namespace

std::string script_safe_json(const nlohmann::json& j) {
  const std::string raw = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(raw.size() + raw.size() / 16);
  for (size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xE2' && i + 2 < raw.size() && raw[i + 1] == '\x80' &&
               (raw[i + 2] == '\xA8' || raw[i + 2] == '\xA9')) {
      out += raw[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

std::string render_page(const nlohmann::json& model) {
  const std::string csp = "default-src 'none'; script-src " + csp_hash(kPageScript) +
                          "; style-src " + csp_hash(kPageStyle) +
                          "; img-src 'none'; connect-src 'none'; base-uri 'none'; "
                          "form-action 'none'";
  // Each marker once, in this order, found in the template only: nothing substituted is ever
  // searched again, so data cannot smuggle in a marker.
  const std::pair<std::string_view, std::string_view> parts[] = {
      {"@CSP@", csp}, {"@STYLE@", kPageStyle}, {"@DATA@", {}}, {"@SCRIPT@", kPageScript}};
  const std::string data = script_safe_json(model);
  std::string_view tpl = kPageTemplate;
  std::string out;
  out.reserve(tpl.size() + kPageStyle.size() + kPageScript.size() + data.size() + csp.size());
  for (const auto& [marker, value] : parts) {
    size_t at = tpl.find(marker);
    if (at == std::string_view::npos) {
      throw std::logic_error("report template lacks " + std::string(marker));
    }
    out.append(tpl.substr(0, at));
    out.append(marker == "@DATA@" ? std::string_view(data) : value);
    tpl.remove_prefix(at + marker.size());
  }
  out.append(tpl);
  return out;
}

}  // namespace cordon::launcher::report
