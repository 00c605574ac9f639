#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

namespace sigma::bootstrap {
namespace {

constexpr size_t kMaxValueBytes = HAL_BOOTSTRAP_MAX_VALUE_BYTES;
constexpr size_t kMaxKeyBytes = HAL_BOOTSTRAP_MAX_KEY_BYTES;  // a plugin's key, before the prefix
// A file name's limit (NAME_MAX) with room for the temp files' marks.
constexpr size_t kMaxNameBytes = 200;

// hal.h's key rule: 1 to 1024 bytes before the NUL.
bool key_allowed(const char* key) {
  if (key == nullptr) return false;
  const size_t n = ::strnlen(key, kMaxKeyBytes + 1);
  return n >= 1 && n <= kMaxKeyBytes;
}

std::string errno_text() { return std::strerror(errno); }

// Keys become file names: safe bytes stay, everything else is %XX. The escape
// is injective, so distinct keys never share a file.
std::string escape_key(const std::string& key) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  // "." and ".." are not file names we may use; a leading '.' marks temp files.
  if (!out.empty() && out[0] == '.') out = "%2e" + out.substr(1);
  // A long key (escaping triples some bytes) keeps its start and ends in a
  // 128-bit hash of the whole key, so it still fits one file name; '~' is
  // never produced by the escape, so no short key's name looks like one.
  if (out.size() > kMaxNameBytes) {
    const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
    char tail[40];
    std::snprintf(tail, sizeof tail, "~%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    out = out.substr(0, kMaxNameBytes - 33) + tail;
  }
  return out;
}

}  // namespace

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_)) {
    throw Error(Code::unavailable, "file store: cannot create directory '" + dir_ +
                                       "': " + (ec ? ec.message() : "not a directory"));
  }
}

std::string FileStore::path_of(const std::string& key) const {
  if (key.empty()) throw Error(Code::invalid_argument, "file store: empty key");
  return dir_ + "/" + escape_key(key);
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (value.size() > kMaxValueBytes) {
    throw Error(Code::invalid_argument, "file store: value for key '" + key + "' is " +
                                            std::to_string(value.size()) +
                                            " bytes, more than the 1 MiB limit");
  }
  static std::atomic<uint64_t> counter{0};
  const std::string final_path = path_of(key);
  const std::string tmp =
      dir_ + "/.tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(Code::unavailable, "file store: cannot create '" + tmp + "': " + errno_text());
  }
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(Code::unavailable, "file store: cannot write '" + tmp + "': " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(Code::unavailable, "file store: cannot rename into '" + final_path + "': " + why);
  }
}

std::optional<std::vector<uint8_t>> FileStore::get(const std::string& key, std::chrono::nanoseconds timeout) {
  const std::string path = path_of(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto backoff = std::chrono::microseconds(50);
  for (;;) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) > kMaxValueBytes) {
        ::close(fd);
        throw Error(Code::unavailable, "file store: '" + path + "' is unreadable or too large");
      }
      std::vector<uint8_t> value(static_cast<size_t>(st.st_size));
      size_t done = 0;
      while (done < value.size()) {
        ssize_t n = ::read(fd, value.data() + done, value.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      ::close(fd);
      value.resize(done);
      return value;
    }
    if (errno != ENOENT) {
      throw Error(Code::unavailable, "file store: cannot open '" + path + "': " + errno_text());
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    // Polling with a growing pause: rendezvous is rare and short, and a file
    // store has no change notification that works on every file system.
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::microseconds(20000));
  }
}

std::unique_ptr<Store> open_store(const std::string& uri) {
  const std::string file_scheme = "file://";
  if (uri.rfind(file_scheme, 0) == 0) return std::make_unique<FileStore>(uri.substr(7));
  if (uri.rfind("redis://", 0) == 0) {
    std::string rest = uri.substr(8), prefix;
    if (auto slash = rest.find('/'); slash != std::string::npos) {
      prefix = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
    }
    const auto colon = rest.rfind(':');
    int port = 6379;
    if (colon != std::string::npos) {
      const std::string p = rest.substr(colon + 1);
      char* end = nullptr;
      const long v = std::strtol(p.c_str(), &end, 10);
      if (p.empty() || *end != '\0' || v <= 0 || v > 65535) {
        throw Error(Code::invalid_argument, "store '" + uri + "': port '" + p + "' is not 1..65535");
      }
      port = static_cast<int>(v);
      rest = rest.substr(0, colon);
    }
    if (rest.empty()) throw Error(Code::invalid_argument, "store '" + uri + "': no host");
    return std::make_unique<RedisStore>(rest, port, prefix.empty() ? prefix : prefix + "/");
  }
  if (uri.find("://") == std::string::npos && !uri.empty()) return std::make_unique<FileStore>(uri);
  throw Error(Code::invalid_argument,
              "store '" + uri +
                  "': unknown scheme (expected file:///dir, redis://host:port[/prefix] "
                  "or a directory path)");
}

namespace {

// The live bootstraps by id: the ctx a plugin holds is an id, looked up on
// every call, so a call after the bootstrap is gone finds nothing.
std::mutex g_live_mu;
std::condition_variable g_live_cv;
std::map<uint64_t, HalBootstrap*> g_live;  // guarded by g_live_mu
uint64_t g_next_id = 1;                    // guarded by g_live_mu

}  // namespace

// One callback's hold on its bootstrap: none when it is gone.
struct BootstrapCall {
  HalBootstrap* self = nullptr;
  explicit BootstrapCall(void* ctx) {
    std::lock_guard<std::mutex> lk(g_live_mu);
    auto it = g_live.find(reinterpret_cast<uintptr_t>(ctx));
    if (it == g_live.end()) return;
    self = it->second;
    ++self->in_flight_;
  }
  ~BootstrapCall() {
    if (self == nullptr) return;
    std::lock_guard<std::mutex> lk(g_live_mu);
    --self->in_flight_;
    g_live_cv.notify_all();
  }
  BootstrapCall(const BootstrapCall&) = delete;
  BootstrapCall& operator=(const BootstrapCall&) = delete;
};

HalBootstrap::HalBootstrap(std::shared_ptr<Store> store, std::string key_prefix)
    : store_(std::move(store)), prefix_(std::move(key_prefix)), uri_(store_->uri()) {
  {
    std::lock_guard<std::mutex> lk(g_live_mu);
    id_ = g_next_id++;
    g_live[id_] = this;
  }
  table_.struct_size = sizeof(hal_bootstrap_t);
  table_.ctx = reinterpret_cast<void*>(static_cast<uintptr_t>(id_));
  table_.kv_set = &HalBootstrap::kv_set;
  table_.kv_get = &HalBootstrap::kv_get;
  table_.store_uri = uri_.c_str();
  table_.key_prefix = prefix_.c_str();
}

HalBootstrap::~HalBootstrap() {
  cancel();  // a kv_get in flight returns within one slice
  std::unique_lock<std::mutex> lk(g_live_mu);
  g_live.erase(id_);
  g_live_cv.wait(lk, [&] { return in_flight_ == 0; });
}

hal_status_t HalBootstrap::kv_set(void* ctx, const char* key, const void* value, uint64_t size) {
  // A plugin's arguments are checked against the limits before anything is
  // read: a wrong size must not make the host copy past the plugin's buffer.
  if (ctx == nullptr || (value == nullptr && size > 0) || size > kMaxValueBytes)
    return HAL_ERR_INVALID_ARGUMENT;
  const BootstrapCall call(ctx);
  HalBootstrap* self = call.self;
  if (self == nullptr) return HAL_ERR_INVALID_ARGUMENT;  // used after comm_destroy
  if (!key_allowed(key)) {
    ++self->refused_keys_;
    return HAL_ERR_INVALID_ARGUMENT;
  }
  try {
    const auto* bytes = static_cast<const uint8_t*>(value);
    self->store_->set(self->prefix_ + key, std::vector<uint8_t>(bytes, bytes + size));
    return HAL_OK;
  } catch (const Error& e) {
    return to_hal_status(e.code());
  } catch (...) {
    return HAL_ERR_INTERNAL;
  }
}

hal_status_t HalBootstrap::kv_get(void* ctx, const char* key, void* value, uint64_t capacity, uint64_t* size,
                                  uint64_t timeout_ns) {
  if (ctx == nullptr || size == nullptr || (value == nullptr && capacity > 0))
    return HAL_ERR_INVALID_ARGUMENT;
  const BootstrapCall call(ctx);
  HalBootstrap* self = call.self;
  if (self == nullptr) return HAL_ERR_INVALID_ARGUMENT;  // used after comm_destroy
  if (!key_allowed(key)) {
    ++self->refused_keys_;
    return HAL_ERR_INVALID_ARGUMENT;
  }
  try {
    // Clamp "for ever" so the chrono arithmetic cannot overflow. The wait
    // runs in slices so that cancel() ends it within one slice.
    const uint64_t max_ns = uint64_t{1} << 62;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::nanoseconds(std::min(timeout_ns, max_ns));
    std::optional<std::vector<uint8_t>> got;
    for (;;) {
      if (self->cancelled_.load()) return HAL_ERR_ABORTED;
      const auto left = deadline - std::chrono::steady_clock::now();
      const auto slice = std::min<std::chrono::nanoseconds>(
          std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0)),
          std::chrono::milliseconds(50));
      got = self->store_->get(self->prefix_ + key, slice);
      if (got || std::chrono::steady_clock::now() >= deadline) break;
    }
    if (!got) return HAL_ERR_TIMEOUT;
    *size = got->size();
    if (capacity > 0) std::memcpy(value, got->data(), std::min<uint64_t>(capacity, got->size()));
    return HAL_OK;
  } catch (const Error& e) {
    return to_hal_status(e.code());
  } catch (...) {
    return HAL_ERR_INTERNAL;
  }
}

}  // namespace sigma::bootstrap
