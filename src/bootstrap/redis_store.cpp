// The bootstrap store in Redis, through hiredis.
#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>

#include <hiredis.h>

#include <mutex>
#include <thread>

namespace sigma::bootstrap {

struct RedisStore::Impl {
  std::string host;
  int port;
  std::string prefix;
  std::mutex mu;  // guards ctx: hiredis contexts are not thread-safe
  redisContext* ctx = nullptr;

  std::string where() const { return "redis://" + host + ":" + std::to_string(port); }

  void connect_locked() {
    if (ctx != nullptr) return;
    timeval tv{5, 0};
    ctx = redisConnectWithTimeout(host.c_str(), port, tv);
    if (ctx == nullptr || ctx->err) {
      std::string why = ctx ? ctx->errstr : "out of memory";
      if (ctx) redisFree(ctx);
      ctx = nullptr;
      throw Error(Code::unavailable, "redis store " + where() + ": cannot connect: " + why);
    }
  }

  // One command; on a connection error the context is dropped so the next
  // call reconnects, and the error is thrown.
  redisReply* command_locked(const char* fmt, const std::string& key, const std::vector<uint8_t>* value) {
    connect_locked();
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
  impl_->connect_locked();
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
      redisReply* r = impl_->command_locked("GET %b", full, nullptr);
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
