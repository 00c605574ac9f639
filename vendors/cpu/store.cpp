#include "store.hpp"

#include "common.hpp"

#include <gloo/common/error.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace cpu_vendor {
namespace {

// A Gloo store over the host's hal_bootstrap_t callbacks.
class CallbackStore final : public gloo::rendezvous::Store {
 public:
  CallbackStore(const hal_bootstrap_t& bs, std::chrono::milliseconds timeout) : bs_(bs), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const hal_status_t st = bs_.kv_set(bs_.ctx, key.c_str(), data.data(), data.size());
    if (st != HAL_OK)
      throw gloo::IoException("bootstrap kv_set('" + key + "') failed with status " + std::to_string(st));
  }

  std::vector<char> get(const std::string& key) override {
    uint64_t size = 0;
    wait_key(key, timeout_, &size);
    std::vector<char> out(size);
    uint64_t again = 0;
    const hal_status_t st = bs_.kv_get(bs_.ctx, key.c_str(), out.data(), out.size(), &again, ns(timeout_));
    if (st != HAL_OK || again != size)
      throw gloo::IoException("bootstrap kv_get('" + key + "') failed with status " + std::to_string(st));
    return out;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) wait_key(k, timeout, nullptr);
  }

 private:
  static uint64_t ns(std::chrono::milliseconds t) { return static_cast<uint64_t>(t.count()) * 1000000ull; }

  void wait_key(const std::string& key, std::chrono::milliseconds timeout, uint64_t* size) {
    uint64_t got = 0;
    const hal_status_t st = bs_.kv_get(bs_.ctx, key.c_str(), nullptr, 0, &got, ns(timeout));
    if (st == HAL_ERR_TIMEOUT)
      throw gloo::IoException("Timeout waiting for bootstrap key '" + key + "' after " +
                              std::to_string(timeout.count()) + " ms");
    if (st != HAL_OK)
      throw gloo::IoException("bootstrap kv_get('" + key + "') failed with status " + std::to_string(st));
    if (size) *size = got;
  }

  hal_bootstrap_t bs_;
  std::chrono::milliseconds timeout_;
};

// Gloo's PrefixStore joins with '/', so a prefix keeps no trailing slash.
std::string trim_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s.empty() ? "sigma" : s;
}

// Gloo's own client of the store the host names (file://, redis://) under
// the communicator's prefix. Its waits run in slices: between them the
// host's callbacks are asked, at no wait, whether the host has cancelled
// the bootstrap (an abort while the communicator is being built), so a
// rank waiting for peers that will never come leaves at once, as it would
// through the callbacks. A wait lasts the creation's timeout.
class UriStore final : public gloo::rendezvous::Store {
 public:
  UriStore(std::unique_ptr<gloo::rendezvous::Store> inner, const std::string& prefix,
           const hal_bootstrap_t& bs, std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), prefixed_(prefix, *inner_), bs_(bs), timeout_(timeout) {}
  void set(const std::string& k, const std::vector<char>& d) override { prefixed_.set(k, d); }
  std::vector<char> get(const std::string& k) override {
    wait({k}, timeout_);
    return prefixed_.get(k);
  }
  void wait(const std::vector<std::string>& k) override { wait(k, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      // At least 1 ms: Gloo reads a timeout of 0 as none.
      const auto slice = std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
      try {
        prefixed_.wait(keys, slice);
        return;
      } catch (const gloo::IoException&) {
        if (Clock::now() >= deadline) throw;
      }
      cancelled_or_gone();
    }
  }

 private:
  // Throws when the host's callbacks say the bootstrap is cancelled or the
  // store gone; TIMEOUT (the probe key is absent) and OK go on.
  void cancelled_or_gone() {
    if (bs_.kv_get == nullptr) return;
    uint64_t size = 0;
    const hal_status_t st = bs_.kv_get(bs_.ctx, "cpu-cancel-probe", nullptr, 0, &size, 0);
    if (st == HAL_ERR_ABORTED || st == HAL_ERR_UNAVAILABLE)
      throw gloo::IoException("the host ended the bootstrap (status " + std::to_string(st) +
                              ") while this rank waited for its peers");
  }

  std::unique_ptr<gloo::rendezvous::Store> inner_;
  gloo::rendezvous::PrefixStore prefixed_;
  hal_bootstrap_t bs_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<gloo::rendezvous::Store> make_gloo_store(const hal_bootstrap_t& bs,
                                                         std::chrono::milliseconds timeout) {
  const std::string uri = bs.store_uri ? bs.store_uri : "";
  const std::string prefix = bs.key_prefix ? bs.key_prefix : "";
  if (!options().force_callback_store && uri.rfind("file://", 0) == 0) {
    return std::make_unique<UriStore>(std::make_unique<gloo::rendezvous::FileStore>(uri.substr(7)),
                                      trim_slash(prefix), bs, timeout);
  }
  if (!options().force_callback_store && uri.rfind("redis://", 0) == 0) {
    // redis://host:port[/prefix]
    std::string rest = uri.substr(8), path;
    if (auto slash = rest.find('/'); slash != std::string::npos) {
      path = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
    }
    const auto colon = rest.rfind(':');
    const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
    const int port = colon == std::string::npos ? 6379 : std::stoi(rest.substr(colon + 1));
    auto redis = std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    return std::make_unique<UriStore>(std::move(redis), trim_slash((path.empty() ? "" : path + "/") + prefix),
                                      bs, timeout);
  }
  if (bs.kv_set == nullptr || bs.kv_get == nullptr) throw std::runtime_error("bootstrap has no kv callbacks");
  return std::make_unique<CallbackStore>(bs, timeout);
}

}  // namespace cpu_vendor
