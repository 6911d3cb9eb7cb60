// OtlpDestination: batches of lines POSTed with Boost.Beast on an io_context of the follower's
// thread, every leg under one deadline that a stop can bring closer; errors are values.
#include "launcher/sidecars/otlp_exporter.h"

#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "launcher/sidecars/otlp_records.h"

namespace cordon::launcher {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct OtlpTarget::Resolved {
  std::vector<tcp::endpoint> endpoints;
  std::optional<asio::ssl::context> tls;
};

namespace {

constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);
constexpr size_t kBatchBytes =
    1 << 20;  // a batch's lines, at most (a collector's usual cap is 4 MiB)
constexpr size_t kAnswerBytes = 64 << 10;  // what is read of a collector's answer

struct Outcome {
  bool done = false;
  bool ok = false;
  uint64_t rejected = 0;  // records the collector said it did not take (partial success)
  std::string error;
};

class OtlpDestination final : public RecordDestination {
 public:
  OtlpDestination(OtlpTarget target, std::string session)
      : target_(std::move(target)), session_(std::move(session)) {}

  bool offer(std::string_view line) override {
    if (bytes_ + line.size() > kOtlpQueueBytes) {
      return false;
    }
    if (lines_.empty()) {
      oldest_ns_ = monotonic_ns();
    }
    lines_.emplace_back(line);
    bytes_ += line.size();
    return true;
  }

  void pump(bool final, const std::atomic<int64_t>& deadline_ns) override {
    if (lines_.empty()) {
      return;
    }
    const int64_t now = monotonic_ns();
    if (!final) {
      // Wait, a poll at a time, for a full batch or its delay, and out a failure's backoff.
      int64_t ready_at = lines_.size() >= kOtlpBatchLines ? now : oldest_ns_ + ns(kOtlpBatchDelay);
      ready_at = std::max(ready_at, retry_at_);
      if (ready_at > now) {
        nap(std::min<int64_t>(ready_at - now,
                              ns(std::chrono::milliseconds(RecordFollower::kPollMs))));
        return;
      }
    } else if (now >= deadline_ns.load()) {
      return;
    }
    std::vector<std::string> batch;
    size_t batch_bytes = 0;
    while (!lines_.empty() && batch.size() < kOtlpBatchLines &&
           (batch.empty() || batch_bytes + lines_.front().size() <= kBatchBytes)) {
      batch_bytes += lines_.front().size();
      batch.push_back(std::move(lines_.front()));
      lines_.pop_front();
    }
    bytes_ -= batch_bytes;
    oldest_ns_ = monotonic_ns();
    Outcome out = post(otlp_logs_body(batch, session_, CORDON_VERSION, now_unix_ns()), deadline_ns);
    if (out.ok) {
      const uint64_t rejected = std::min<uint64_t>(out.rejected, batch.size());
      sent_ += batch.size() - rejected;
      lost_ += rejected;
      if (rejected > 0) {
        error_ = out.error;
      }
    } else {
      lost_ += batch.size();
      error_ = out.error;
      retry_at_ = monotonic_ns() + ns(kOtlpRetryDelay);
    }
  }

  uint64_t pending() const override { return lines_.size(); }
  uint64_t sent() const override { return sent_; }
  uint64_t lost() const override { return lost_; }
  std::string error() const override { return error_; }

 private:
  template <typename D>
  static int64_t ns(D d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  static void nap(int64_t nanos) { ::poll(nullptr, 0, static_cast<int>(nanos / 1'000'000) + 1); }
  static int64_t now_unix_ns() { return ns(std::chrono::system_clock::now().time_since_epoch()); }

  // One POST, run on this thread until it ends or its deadline (the request's, or the stop's if
  // that comes first) passes; then the socket is closed and the exchange ends as an error.
  Outcome post(std::string body, const std::atomic<int64_t>& stop_deadline_ns) {
    current_ = Outcome{};
    live_ = nullptr;
    if (!ioc_) {
      ioc_.emplace(1);
    }
    ioc_->restart();
    asio::co_spawn(*ioc_, exchange(std::move(body)), [this](std::exception_ptr e) {
      if (e) {
        current_.ok = false;
        current_.error = "the exchange with the collector failed";
      }
      current_.done = true;
    });
    const int64_t request_deadline = monotonic_ns() + ns(kOtlpRequestTimeout);
    int64_t closed_at = 0;
    while (!current_.done) {
      ioc_->run_for(std::chrono::milliseconds(RecordFollower::kPollMs));
      const int64_t now = monotonic_ns();
      if (current_.done) {
        break;
      }
      if (closed_at == 0 && now >= std::min(request_deadline, stop_deadline_ns.load())) {
        closed_at = now;
        if (live_ != nullptr) {
          beast::error_code ignored;
          live_->close(ignored);
        }
      } else if (closed_at != 0 && now - closed_at > ns(kOtlpRetryDelay)) {
        // Closing did not end the exchange: drop the io_context and the coroutine with it (its
        // destructors touch only members), so no deadline is ever outlived by more than this.
        ioc_.reset();
        break;
      }
    }
    if (closed_at != 0 && !current_.ok) {
      current_.error = "no answer from the collector in time";
    }
    return current_;
  }

  asio::awaitable<void> exchange(std::string body) {
    Outcome& out = current_;
    beast::tcp_stream stream(co_await asio::this_coro::executor);
    live_ = &stream.socket();
    struct Unpublish {
      tcp::socket*& p;
      ~Unpublish() { p = nullptr; }
    } unpublish{live_};
    auto [cec, ep] =
        co_await asio::async_connect(stream.socket(), target_.resolved->endpoints, use_nothrow);
    if (cec) {
      out.error = "connecting to " + target_.parsed.host_header() + ": " + cec.message();
      co_return;
    }
    if (!target_.parsed.tls) {
      co_await request(stream, std::move(body), out);
      co_return;
    }
    beast::ssl_stream<beast::tcp_stream&> tls(stream, *target_.resolved->tls);
    SSL* ssl = tls.native_handle();
    in6_addr a6;
    in_addr a4;
    const std::string& host = target_.parsed.host;
    if (::inet_pton(AF_INET, host.c_str(), &a4) == 1 ||
        ::inet_pton(AF_INET6, host.c_str(), &a6) == 1) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, host.c_str());
      SSL_set1_host(ssl, host.c_str());
    }
    auto [hec] = co_await tls.async_handshake(asio::ssl::stream_base::client, use_nothrow);
    if (hec) {
      const long vr = SSL_get_verify_result(ssl);
      out.error = "TLS with " + target_.parsed.host_header() + ": " +
                  (vr != X509_V_OK ? std::string("certificate verify failed: ") +
                                         X509_verify_cert_error_string(vr)
                                   : hec.message());
      co_return;
    }
    co_await request(tls, std::move(body), out);
  }

  template <typename Stream>
  asio::awaitable<void> request(Stream& stream, std::string body, Outcome& out) {
    http::request<http::string_body> req{http::verb::post, target_.parsed.target, 11};
    req.set(http::field::host, target_.parsed.host_header());
    req.set(http::field::user_agent, std::string("cordon/") + CORDON_VERSION);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::connection, "close");
    req.body() = std::move(body);
    req.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, req, use_nothrow);
    if (wec) {
      out.error = "sending to " + target_.parsed.host_header() + ": " + wec.message();
      co_return;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kAnswerBytes);
    parser.header_limit(16 << 10);
    auto [rec, rn] = co_await http::async_read(stream, buf, parser, use_nothrow);
    if (rec) {
      out.error = "reading the answer of " + target_.parsed.host_header() + ": " + rec.message();
      co_return;
    }
    const auto& res = parser.get();
    const unsigned status = res.result_int();
    if (status < 200 || status > 299) {
      out.error =
          "the collector answered HTTP " + std::to_string(status) + " " + std::string(res.reason());
      co_return;
    }
    out.ok = true;
    // {"partialSuccess":{"rejectedLogRecords":"3","errorMessage":"..."}}: some were not kept.
    auto j = nlohmann::json::parse(res.body(), nullptr, false);
    if (j.is_object()) {
      auto ps = j.find("partialSuccess");
      if (ps != j.end() && ps->is_object()) {
        auto r = ps->find("rejectedLogRecords");
        if (r != ps->end() && r->is_number_unsigned()) {
          out.rejected = r->get<uint64_t>();
        } else if (r != ps->end() && r->is_string()) {
          out.rejected = std::strtoull(r->get_ref<const std::string&>().c_str(), nullptr, 10);
        }
        auto m = ps->find("errorMessage");
        out.error = "the collector rejected records" +
                    (m != ps->end() && m->is_string() ? ": " + m->get<std::string>().substr(0, 200)
                                                      : std::string());
      }
    }
  }

  OtlpTarget target_;
  std::string session_;
  Outcome current_;              // the POST in flight
  tcp::socket* live_ = nullptr;  // its socket, for closing it at the deadline
  // One POST at a time runs on it, on this thread; declared after what its coroutine touches.
  std::optional<asio::io_context> ioc_;
  std::deque<std::string> lines_;
  size_t bytes_ = 0;
  int64_t oldest_ns_ = 0;  // when the oldest queued line was taken
  int64_t retry_at_ = 0;
  uint64_t sent_ = 0, lost_ = 0;
  std::string error_;
};

}  // namespace

Result<OtlpTarget> prepare_otlp(const std::string& url) {
  OtlpTarget t;
  t.url = url;
  ASSIGN_OR_RETURN(t.parsed, policy::parse_otlp_url(url));
  t.resolved = std::make_shared<OtlpTarget::Resolved>();
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto results = resolver.resolve(t.parsed.host, std::to_string(t.parsed.port),
                                  tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return make_error("\"" + url + "\": resolving " + t.parsed.host + ": " + ec.message(),
                      "give a host name this machine resolves, or an address");
  }
  for (const auto& r : results) {
    t.resolved->endpoints.push_back(r.endpoint());
  }
  if (t.parsed.tls) {
    auto& ctx = t.resolved->tls.emplace(asio::ssl::context::tls_client);
    ctx.set_verify_mode(asio::ssl::verify_peer);
    // The host's trust store (SSL_CERT_FILE / SSL_CERT_DIR when set), never the session's CA.
    if (SSL_CTX_set_default_verify_paths(ctx.native_handle()) != 1) {
      return make_error("\"" + url + "\": loading the system's trusted certificates failed",
                        "install ca-certificates or set SSL_CERT_FILE");
    }
    SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  }
  return t;
}

Result<std::unique_ptr<RecordFollower>> start_otlp_exporter(const std::string& events_path,
                                                            const std::string& session,
                                                            OtlpTarget target) {
  std::string name = target.url;
  return RecordFollower::start(events_path, std::move(name),
                               std::make_unique<OtlpDestination>(std::move(target), session));
}

}  // namespace cordon::launcher
