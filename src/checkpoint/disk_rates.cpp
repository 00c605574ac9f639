#include "disk_rates.hpp"

#include "io.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace sigma::checkpoint::disk {
namespace {

constexpr uint64_t kProbeBytes = uint64_t{128} << 20;
constexpr uint64_t kBlock = uint64_t{8} << 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads the whole file in blocks, past the page cache where it can:
// O_DIRECT, else the cache dropped first.
double read_rate(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  std::unique_ptr<uint8_t, void (*)(void*)> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, kBlock)),
                                                std::free);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t got = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.get(), kBlock);
    if (n < 0 && errno == EINVAL) {  // O_DIRECT refused at read time: buffered
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT);
      n = ::read(fd, buf.get(), kBlock);
    }
    if (n <= 0) break;
    got += static_cast<uint64_t>(n);
  }
  const double s = seconds_since(t0);
  ::close(fd);
  return got == kProbeBytes && s > 0 ? static_cast<double>(got) / s : 0;
}

choice::DiskRates measure(const std::string& dir) {
  const std::string path = dir + "/.disk-probe-" + std::to_string(::getpid());
  std::unique_ptr<uint8_t, void (*)(void*)> block(static_cast<uint8_t*>(std::aligned_alloc(4096, kBlock)),
                                                  std::free);
  // Bytes that no file system compresses or deduplicates away.
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto* words = reinterpret_cast<uint64_t*>(block.get());
  for (uint64_t i = 0; i < kBlock / 8; ++i) words[i] = (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
  choice::DiskRates r;
  try {
    io::Writer w(path, true);
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t done = 0; done < kProbeBytes; done += kBlock) w.write(block.get(), kBlock);
    // Past the page cache the writes are the device's streaming rate, and
    // the final fsync a one-off of any save's size; buffered, the fsync is
    // where the bytes reach the device, so it counts.
    const double streamed = seconds_since(t0);
    w.sync_and_close();
    r.write = static_cast<double>(kProbeBytes) / (w.direct() ? streamed : seconds_since(t0));
  } catch (...) {
    io::remove_tree(path);
    throw;
  }
  r.read = read_rate(path);
  io::remove_tree(path);
  return r;
}

// ROOT/.disk-rates when it holds the figures of device `dev`.
bool read_cached(const std::string& file, dev_t dev, choice::DiskRates* out) {
  std::FILE* f = std::fopen(file.c_str(), "r");
  if (f == nullptr) return false;
  unsigned long long d = 0;
  double r = 0, w = 0;
  const bool ok = std::fscanf(f, "%llu %lf %lf", &d, &r, &w) == 3 && d == dev && r > 0 && w > 0;
  std::fclose(f);
  if (ok) *out = {r, w};
  return ok;
}

void write_cached(const std::string& file, dev_t dev, const choice::DiskRates& r) {
  const std::string tmp = file + ".tmp-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return;  // a cache: the next process measures again
  std::fprintf(f, "%llu %.0f %.0f\n", static_cast<unsigned long long>(dev), r.read, r.write);
  if (std::fclose(f) == 0) {
    std::rename(tmp.c_str(), file.c_str());
  } else {
    std::remove(tmp.c_str());
  }
}

// Measured, or read from the root's file; one process measures at a time.
choice::DiskRates measured_once(const std::string& root, dev_t dev) {
  const std::string file = root + "/.disk-rates";
  choice::DiskRates r;
  if (read_cached(file, dev, &r)) return r;
  const int lock = ::open((file + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock >= 0) ::flock(lock, LOCK_EX);
  try {
    if (!read_cached(file, dev, &r)) {
      r = measure(root);
      write_cached(file, dev, r);
    }
  } catch (...) {
    if (lock >= 0) ::close(lock);
    throw;
  }
  if (lock >= 0) ::close(lock);
  return r;
}

}  // namespace

choice::DiskRates rates(const std::string& root, double stated_read, double stated_write) {
  choice::DiskRates r{stated_read, stated_write};
  if (r.read > 0 && r.write > 0) return r;
  struct stat st {};
  const dev_t dev = ::stat(root.c_str(), &st) == 0 ? st.st_dev : 0;
  static std::mutex mu;
  static std::map<dev_t, choice::DiskRates> known;  // this process's, by device
  choice::DiskRates m;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = known.find(dev);
    if (it == known.end()) it = known.emplace(dev, measured_once(root, dev)).first;
    m = it->second;
  }
  if (r.read <= 0) r.read = m.read;
  if (r.write <= 0) r.write = m.write;
  return r;
}

}  // namespace sigma::checkpoint::disk
