// sigma/bootstrap.hpp -- the host's side of communicator bootstrap.
//
// Ranks of a job find each other through a key-value store that every rank
// can reach. The HAL hands a plugin this store as callbacks (hal_bootstrap_t);
// this header is the C++ side: the Store interface, the file store used on one
// host (a folder in the job directory), and the adapter that turns a Store
// into the callbacks for one communicator.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sigma::bootstrap {

// A key-value store shared by every rank of a job. Implementations are
// thread-safe: any method may be called from any thread, concurrently.
class SIGMA_EXPORT Store {
 public:
  virtual ~Store() = default;
  // Stores `value` under `key`, replacing an old value. Throws sigma::Error
  // (unavailable) when the store cannot be written.
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // The value under `key`, waiting until it exists or `timeout` passes
  // (std::nullopt then). Throws sigma::Error (unavailable) on store failure.
  virtual std::optional<std::vector<uint8_t>> get(const std::string& key,
                                                  std::chrono::nanoseconds timeout) = 0;
  // A URI naming the store, e.g. "file:///path". Never empty.
  virtual std::string uri() const = 0;
};

// A store in a folder: one file per key, written to a temporary name and
// renamed, so a reader never sees half a value. For ranks on one host (or a
// shared file system). Keys may hold any bytes; they are escaped into file
// names. Values are at most 1 MiB.
class SIGMA_EXPORT FileStore final : public Store {
 public:
  // Creates `dir` (and parents) when missing. Throws sigma::Error (unavailable)
  // when it cannot.
  explicit FileStore(std::string dir);
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::optional<std::vector<uint8_t>> get(const std::string& key, std::chrono::nanoseconds timeout) override;
  std::string uri() const override { return "file://" + dir_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string path_of(const std::string& key) const;
  std::string dir_;
};

// A store in a Redis server, for ranks on many hosts: every key is stored as
// "<prefix><key>". One connection, reconnected after an error.
class SIGMA_EXPORT RedisStore final : public Store {
 public:
  // Connects to host:port. Throws sigma::Error (unavailable) naming the
  // address and Redis's reason when it cannot.
  RedisStore(std::string host, int port, std::string prefix = "");
  ~RedisStore() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::optional<std::vector<uint8_t>> get(const std::string& key, std::chrono::nanoseconds timeout) override;
  std::string uri() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Opens a store by URI: "file:///abs/dir", "redis://host:port[/prefix]", or a
// plain directory path.
// Throws sigma::Error (invalid_argument) for a scheme it does not know.
SIGMA_EXPORT std::unique_ptr<Store> open_store(const std::string& uri);

// The hal_bootstrap_t callbacks of one communicator over a Store: every key
// the plugin uses is prefixed with `key_prefix`. The object owns the table and
// must outlive the communicator it was given to (until comm_destroy returns).
// Thread-safety: the callbacks may be called from any thread, concurrently.
class SIGMA_EXPORT HalBootstrap {
 public:
  HalBootstrap(std::shared_ptr<Store> store, std::string key_prefix);
  // Cancels what waits, waits for callbacks in flight, and makes every later
  // call through the table return HAL_ERR_INVALID_ARGUMENT: a plugin that
  // keeps the table past comm_destroy gets an error, not freed memory.
  ~HalBootstrap();
  HalBootstrap(const HalBootstrap&) = delete;
  HalBootstrap& operator=(const HalBootstrap&) = delete;
  const hal_bootstrap_t* table() const { return &table_; }
  // Makes every kv_get, waiting or later, return HAL_ERR_ABORTED within
  // ~50 ms: a communicator being created for a job that lost a rank gives up
  // at once instead of waiting out its timeout. Any thread.
  void cancel() { cancelled_ = true; }
  // How many calls came with a key outside hal.h's rule (empty, or over
  // HAL_BOOTSTRAP_MAX_KEY_BYTES) and were refused: the conformance suite's
  // check that a plugin keeps to it. Any thread.
  uint64_t refused_keys() const { return refused_keys_.load(); }

 private:
  static hal_status_t kv_set(void* ctx, const char* key, const void* value, uint64_t size);
  static hal_status_t kv_get(void* ctx, const char* key, void* value, uint64_t capacity, uint64_t* size,
                             uint64_t timeout_ns);
  std::shared_ptr<Store> store_;
  std::string prefix_;
  std::string uri_;
  hal_bootstrap_t table_{};
  std::atomic<bool> cancelled_{false};
  std::atomic<uint64_t> refused_keys_{0};
  uint64_t id_ = 0;    // the table's ctx: a key into the live bootstraps, never a pointer
  int in_flight_ = 0;  // callbacks running (guarded by the registry's lock)
  friend struct BootstrapCall;
};

}  // namespace sigma::bootstrap
