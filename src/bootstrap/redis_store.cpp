// The bootstrap store in Redis, through hiredis.
#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>

#include <hiredis.h>

#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace sigma::bootstrap {

namespace {

// No single connect or command waits longer than this, nor past the
// caller's deadline (a server that accepts and never answers, a network
// that drops packets): hiredis gets it as its socket timeouts.
constexpr std::chrono::nanoseconds kMaxCommand = std::chrono::seconds(5);
constexpr std::chrono::nanoseconds kMinCommand = std::chrono::milliseconds(20);

timeval to_timeval(std::chrono::nanoseconds bound) {
  bound = std::clamp(bound, kMinCommand, kMaxCommand);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(bound).count();
  return timeval{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
}

}  // namespace

struct RedisStore::Impl {
  std::string host;
  int port;
  std::string prefix;
  std::mutex mu;  // guards ctx: hiredis contexts are not thread-safe
  redisContext* ctx = nullptr;

  std::string where() const { return "redis://" + host + ":" + std::to_string(port); }

  void connect_locked(std::chrono::nanoseconds bound) {
    if (ctx != nullptr) return;
    ctx = redisConnectWithTimeout(host.c_str(), port, to_timeval(bound));
    if (ctx == nullptr || ctx->err) {
      std::string why = ctx ? ctx->errstr : "out of memory";
      if (ctx) redisFree(ctx);
      ctx = nullptr;
      throw Error(Code::unavailable, "redis store " + where() + ": cannot connect: " + why);
    }
  }

  // One command, its connect and reply bounded by `bound` (clamped to
  // kMinCommand..kMaxCommand); on a connection error or a timeout the
  // context is dropped so the next call reconnects, and the error is thrown.
  redisReply* command_locked(const char* fmt, const std::string& key, const std::vector<uint8_t>* value,
                             std::chrono::nanoseconds bound = kMaxCommand) {
    connect_locked(bound);
    redisSetTimeout(ctx, to_timeval(bound));
    void* r = value ? redisCommand(ctx, fmt, key.data(), key.size(), value->data(), value->size())
                    : redisCommand(ctx, fmt, key.data(), key.size());
    if (r == nullptr) {
      std::string why = ctx->errstr;
      redisFree(ctx);
      ctx = nullptr;
      throw Error(Code::unavailable, "redis store " + where() + ": " + why);
    }
    auto* reply = static_cast<redisReply*>(r);
    if (reply->type == REDIS_REPLY_ERROR) {
      std::string why(reply->str, reply->len);
      freeReplyObject(reply);
      throw Error(Code::unavailable, "redis store " + where() + ": " + why);
    }
    return reply;
  }
};

RedisStore::RedisStore(std::string host, int port, std::string prefix) : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->prefix = std::move(prefix);
  std::lock_guard lk(impl_->mu);
  impl_->connect_locked(kMaxCommand);
}

RedisStore::~RedisStore() {
  if (impl_->ctx) redisFree(impl_->ctx);
}

std::string RedisStore::uri() const {
  std::string p = impl_->prefix;
  if (!p.empty() && p.back() == '/') p.pop_back();
  return impl_->where() + (p.empty() ? "" : "/" + p);
}

void RedisStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (value.size() > (size_t{1} << 20)) {
    throw Error(Code::invalid_argument, "redis store: value for key '" + key + "' is " +
                                            std::to_string(value.size()) +
                                            " bytes, more than the 1 MiB limit");
  }
  std::lock_guard lk(impl_->mu);
  freeReplyObject(impl_->command_locked("SET %b %b", impl_->prefix + key, &value));
}

std::optional<std::vector<uint8_t>> RedisStore::get(const std::string& key,
                                                    std::chrono::nanoseconds timeout) {
  const std::string full = impl_->prefix + key;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto backoff = std::chrono::microseconds(200);
  for (;;) {
    {
      std::lock_guard lk(impl_->mu);
      redisReply* r =
          impl_->command_locked("GET %b", full, nullptr, deadline - std::chrono::steady_clock::now());
      if (r->type == REDIS_REPLY_STRING) {
        std::vector<uint8_t> v(r->str, r->str + r->len);
        freeReplyObject(r);
        return v;
      }
      freeReplyObject(r);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    // Rendezvous is short and rare: polling keeps one plain connection.
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::microseconds(20000));
  }
}

}  // namespace sigma::bootstrap
