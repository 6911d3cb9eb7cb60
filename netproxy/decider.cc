// The decider channel: questions out through a write queue, replies in through one reader, each
// open question a suspended coroutine woken by its reply, its timer or the channel's end.
#include "netproxy/decider.h"

#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include "netproxy/client_process.h"
#include "netproxy/context.h"

namespace cordon::netproxy {

namespace {

// Questions open at once. More are denied at once (decider-error) rather than queued without
// bound: a program that opens connections in a loop must not grow the proxy's memory.
constexpr size_t kMaxOpen = 1024;

std::string session_key(const DeciderQuestion& q) {
  return q.kind + " " + q.host + " " + std::to_string(q.port);
}

}  // namespace

const char* source_name(DecisionSource s) {
  switch (s) {
    case DecisionSource::Policy:
      return "policy";
    case DecisionSource::Decider:
      return "decider";
    case DecisionSource::Person:
      return "person";
    case DecisionSource::Timeout:
      return "timeout";
    case DecisionSource::DeciderError:
      return "decider-error";
  }
  return "decider-error";
}

Decider::Decider(Context& ctx, int fd, std::chrono::milliseconds timeout, bool person,
                 pid_t sandbox_init)
    : ctx_(ctx),
      channel_(ctx.io, fd),
      timeout_(timeout),
      answers_as_(person ? DecisionSource::Person : DecisionSource::Decider),
      sandbox_init_(sandbox_init) {}

Decider::~Decider() = default;

void Decider::start() {
  asio::co_spawn(ctx_.io, read_replies(),
                 [](std::exception_ptr e) { log_coroutine_end("decider reader", e); });
}

void Decider::close() { broken("the decider channel was closed"); }

asio::awaitable<DeciderVerdict> Decider::ask(DeciderQuestion q) {
  const auto key = session_key(q);
  if (auto it = session_.find(key); it != session_.end()) {
    DeciderVerdict v = it->second;
    v.cached = true;
    co_return v;
  }
  q.id = next_id_++;
  DeciderVerdict v;
  const auto asked = Clock::now();
  if (broken_) {
    v.reason = *broken_;
  } else if (pending_.size() >= kMaxOpen) {
    v.reason = "more than " + std::to_string(kMaxOpen) + " questions open at once";
  } else {
    std::optional<DeciderVerdict> answer;
    asio::steady_timer wake(ctx_.io);
    wake.expires_after(timeout_);
    if (sandbox_init_ > 0 && !q.client.empty()) {
      // Looked up now, while the connection is still open and held: the process is the one
      // connecting, not whoever holds the address at the end of the session.
      const bool udp = q.kind == "dns";
      const auto budget = std::chrono::duration_cast<std::chrono::microseconds>(kProcessLookup);
      q.process = find_client_process(sandbox_init_, q.client, udp, budget);
      if (q.process.empty() && udp) {
        q.process =
            find_client_process(sandbox_init_, q.client, false, budget / 2);  // DNS over TCP
      }
    }
    pending_.emplace(q.id, Pending{&wake, &answer});
    outbox_.push_back(question_line(q));
    if (!writing_) {
      writing_ = true;
      asio::co_spawn(ctx_.io, write_queued(),
                     [](std::exception_ptr e) { log_coroutine_end("decider writer", e); });
    }
    // Woken early (cancelled) by answer() or broken(); otherwise the deadline passed.
    (void)co_await wake.async_wait(use_nothrow);
    pending_.erase(q.id);
    if (answer) {
      v = std::move(*answer);
    } else {
      v.source = DecisionSource::Timeout;
      v.reason = "the decider did not answer within " +
                 (timeout_.count() % 1000 == 0 ? std::to_string(timeout_.count() / 1000) + " s"
                                               : std::to_string(timeout_.count()) + " ms");
    }
  }
  if (answered(v.source) && v.session) {
    session_.emplace(key, v);
  }
  const auto waited =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - asked).count();
  nlohmann::json ev = {{"id", q.id},
                       {"kind", q.kind},
                       {"name", q.host},
                       {"port", q.port},
                       {"mode", q.mode},
                       {"decision", v.allow ? "allow" : "deny"},
                       {"scope", v.session ? "session" : "once"},
                       {"decided_by", source_name(v.source)},
                       {"wait_us", waited}};
  if (!v.reason.empty()) {
    ev["reason"] = v.reason;
  }
  if (!q.client.empty()) {
    ev["client"] = q.client;
  }
  if (!q.method.empty()) {
    ev["method"] = q.method;
    ev["path"] = q.path;
  }
  if (!q.process.empty()) {
    // The process as /proc showed it when the question was asked (the record's net.attribution
    // is the preload shim's account, joined at the end).
    ev["pid"] = q.process.front().pid;
    ev["exe"] = q.process.front().exe;
    ev["argv"] = q.process.front().argv;
    nlohmann::json parents = nlohmann::json::array();
    for (size_t i = 1; i < q.process.size(); ++i) {
      parents.push_back(q.process[i].pid);
    }
    ev["parent_pids"] = std::move(parents);
  }
  ctx_.emit("net.decider", std::move(ev));
  co_return v;
}

void Decider::answer(uint64_t id, DeciderVerdict v) {
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    // Timed out already, or never asked: the connection was decided without it.
    spdlog::debug("decider: reply for {} which is not open; ignored", id);
    return;
  }
  *it->second.answer = std::move(v);
  it->second.wake->cancel();
  pending_.erase(it);
}

void Decider::broken(const std::string& why) {
  if (broken_) {
    return;
  }
  broken_ = why;
  ctx_.emit("net.decider", {{"decided_by", "decider-error"}, {"error", why}});
  boost::system::error_code ignored;
  channel_.close(ignored);
  auto open = std::move(pending_);
  pending_.clear();
  for (auto& [id, p] : open) {
    DeciderVerdict v;
    v.reason = why;
    *p.answer = std::move(v);
    p.wake->cancel();
  }
}

asio::awaitable<void> Decider::read_replies() {
  std::string buf;
  while (!broken_) {
    auto [ec, n] = co_await asio::async_read_until(
        channel_, asio::dynamic_buffer(buf, kMaxDeciderLine + 1), '\n', use_nothrow);
    if (ec) {
      broken(ec == asio::error::eof         ? "the decider closed its end of the channel"
             : ec == asio::error::not_found ? "the decider sent a line longer than " +
                                                  std::to_string(kMaxDeciderLine) + " bytes"
             : ec == asio::error::operation_aborted ? "the decider channel was closed"
                                                    : "reading from the decider: " + ec.message());
      co_return;
    }
    std::string_view line(buf.data(), n - 1);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (auto reply = parse_decider_reply(line); reply.ok()) {
      DeciderVerdict v;
      v.allow = reply->allow;
      v.session = reply->session;
      v.reason = std::move(reply->reason);
      v.source = answers_as_;
      answer(reply->id, std::move(v));
    } else {
      // A malformed reply denies the question it names (fail closed); one naming none cannot be
      // matched to a question, and every open one is denied rather than left to guess.
      const std::string why = "malformed decider reply: " + reply.error().message;
      ctx_.emit("net.decider", {{"decided_by", "decider-error"}, {"error", why}});
      DeciderVerdict v;
      v.reason = why;
      if (uint64_t id = reply_id_hint(line); id != 0 && pending_.count(id) != 0) {
        answer(id, std::move(v));
      } else {
        auto open = std::move(pending_);
        pending_.clear();
        for (auto& [id2, p] : open) {
          *p.answer = v;
          p.wake->cancel();
        }
      }
    }
    buf.erase(0, n);
  }
}

asio::awaitable<void> Decider::write_queued() {
  while (!outbox_.empty() && !broken_) {
    auto [ec, n] = co_await asio::async_write(channel_, asio::buffer(outbox_.front()), use_nothrow);
    if (ec) {
      broken("writing to the decider: " + ec.message());
      break;
    }
    outbox_.pop_front();
  }
  outbox_.clear();
  writing_ = false;
}

}  // namespace cordon::netproxy
