#include "io.hpp"

#include "regular_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace sigma::checkpoint::io {
namespace {

[[noreturn]] void os_fail(const std::string& what, const std::string& path, int err) {
  throw Error(Code::unavailable, "checkpoint: " + what + " " + path + ": " + std::strerror(err));
}

// Only regular files are checkpoint files: a FIFO would block a reader for
// ever, a device or folder is not what the manifest describes.
[[noreturn]] void refuse_kind(const std::string& path, mode_t mode) {
  throw Error(Code::data_loss,
              "checkpoint: " + path + ": not a regular file (" + files::kind_of_mode(mode) + "): refused");
}

}  // namespace

constexpr uint64_t kDirectBuffer = uint64_t{8} << 20;
constexpr uint64_t kDirectAlign = 4096;

Writer::Writer(std::string path, bool direct) : path_(std::move(path)) {
  if (direct) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ >= 0) {
      buf_ = static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, kDirectBuffer));
      if (buf_ == nullptr) {
        ::close(fd_);
        throw Error(Code::out_of_memory, "checkpoint: no memory for the write buffer of " + path_);
      }
      direct_ = true;
      return;
    }
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) os_fail("cannot create", path_, errno);
}

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
  std::free(buf_);
}

// Writes the first `bytes` of the buffer (a multiple of the alignment) at
// flushed_. A file system that takes O_DIRECT at open but refuses an aligned
// write turns it off and goes on buffered.
void Writer::flush_direct(uint64_t bytes) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd_, buf_ + done, bytes - done, static_cast<off_t>(flushed_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && done == 0 &&
        (::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) == 0))
      continue;
    if (n < 0) os_fail("writing", path_, errno);
    if (n == 0) os_fail("writing", path_, ENOSPC);
    done += static_cast<uint64_t>(n);
  }
  flushed_ += bytes;
}

void Writer::flush_aligned() {
  if (!direct_) return;
  const uint64_t aligned = buf_len_ / kDirectAlign * kDirectAlign;
  if (aligned == 0) return;
  flush_direct(aligned);
  std::memmove(buf_, buf_ + aligned, buf_len_ - aligned);
  buf_len_ -= aligned;
}

void Writer::write_direct(const uint8_t* p, uint64_t bytes) {
  while (bytes > 0) {
    const uint64_t n = std::min(bytes, kDirectBuffer - buf_len_);
    std::memcpy(buf_ + buf_len_, p, n);
    buf_len_ += n;
    p += n;
    bytes -= n;
    size_ += n;
    if (buf_len_ == kDirectBuffer) {
      flush_direct(kDirectBuffer);
      buf_len_ = 0;
    }
  }
}

void Writer::write(const void* data, uint64_t bytes) {
  if (direct_) return write_direct(static_cast<const uint8_t*>(data), bytes);
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min<uint64_t>(bytes, uint64_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      os_fail("writing", path_, errno);
    }
    if (n == 0) os_fail("writing", path_, ENOSPC);
    p += n;
    bytes -= static_cast<uint64_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
  // Streaming writeback: start writing each 32 MiB to disk as soon as it is
  // in the page cache, and wait for the one before it, so that the disk
  // works while the next chunks compress (a plain write + fsync leaves the
  // disk idle until the fsync) and dirty memory stays bounded. A hint only:
  // durability is the fsync's; a file system without it is fine.
  constexpr uint64_t kWindow = uint64_t{32} << 20;
  if (size_ - started_ >= kWindow) {
    if (started_ > waited_)
      (void)::sync_file_range(
          fd_, static_cast<off_t>(waited_), static_cast<off_t>(started_ - waited_),
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    waited_ = started_;
    (void)::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(size_ - started_),
                            SYNC_FILE_RANGE_WRITE);
    started_ = size_;
  }
}

void Writer::pad_to(uint64_t offset) {
  static const uint8_t zeros[kDirectAlign] = {};
  while (size_ < offset) write(zeros, std::min<uint64_t>(offset - size_, sizeof zeros));
}

void Writer::sync_and_close() {
  if (direct_ && buf_len_ > 0) {
    // The tail, padded to the alignment, then the file cut to its size.
    const uint64_t padded = (buf_len_ + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    std::memset(buf_ + buf_len_, 0, padded - buf_len_);
    flush_direct(padded);
    buf_len_ = 0;
    if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) os_fail("truncating", path_, errno);
  }
  if (::fsync(fd_) != 0) os_fail("fsync of", path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) os_fail("closing", path_, errno);
}

void write_file(const std::string& path, const void* data, uint64_t bytes) {
  Writer w(path);
  w.write(data, bytes);
  w.sync_and_close();
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(Code::data_loss, "checkpoint: " + path + ": missing (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) refuse_kind(path, st.st_mode);
  return static_cast<uint64_t>(st.st_size);
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes) {
  const uint64_t size = file_size(path);
  if (size > max_bytes)
    throw Error(Code::data_loss, "checkpoint: " + path + ": " + std::to_string(size) +
                                     " bytes, more than the " + std::to_string(max_bytes) + " allowed");
  std::vector<uint8_t> out(size);
  read_at(path, 0, out.data(), size);
  return out;
}

Reader::Reader(std::string path) : path_(std::move(path)) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer for
  // ever. Only regular files are read; anything else is refused by name.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0)
    throw Error(Code::data_loss, "checkpoint: " + path_ + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    refuse_kind(path_, st.st_mode);
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  // The same file for direct reads, where it opens so: opened without
  // blocking and checked to be the very file just vetted (the path could
  // have been replaced in between, by a FIFO say).
  direct_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_DIRECT);
  struct stat dst {};
  if (direct_fd_ >= 0 &&
      (::fstat(direct_fd_, &dst) != 0 || dst.st_dev != st.st_dev || dst.st_ino != st.st_ino)) {
    ::close(direct_fd_);
    direct_fd_ = -1;
  }
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

bool Reader::pread_direct(uint64_t offset, uint8_t* out, uint64_t bytes, uint64_t need) const {
  uint64_t done = 0;
  while (done < need) {
    const ssize_t n = ::pread(direct_fd_, out + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && done == 0) return false;
    if (n <= 0)
      throw Error(Code::data_loss,
                  "checkpoint: " + path_ + ": truncated: wanted " + std::to_string(need) + " bytes at " +
                      std::to_string(offset) + ", got " + std::to_string(done) +
                      (n < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
    done += static_cast<uint64_t>(n);
  }
  return true;
}

namespace {

// xxh3-64 of bytes handed over piece by piece: the same value as one call
// over all of them.
class Hash {
 public:
  Hash() : s_(XXH3_createState(), XXH3_freeState) {
    if (s_ == nullptr) throw Error(Code::out_of_memory, "checkpoint: no memory for a hash state");
    XXH3_64bits_reset(s_.get());
  }
  void add(const uint8_t* p, uint64_t n) { XXH3_64bits_update(s_.get(), p, n); }
  uint64_t value() const { return XXH3_64bits_digest(s_.get()); }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> s_;
};

// Copies `n` bytes and hashes them in pieces small enough to stay in the
// core's cache between the two: the copy reads each piece once from memory.
void copy_hashed(uint8_t* to, const uint8_t* from, uint64_t n, Hash& h) {
  constexpr uint64_t kPiece = 128 << 10;
  for (uint64_t i = 0; i < n; i += kPiece) {
    const uint64_t k = std::min(kPiece, n - i);
    h.add(from + i, k);
    std::memcpy(to + i, from + i, k);
  }
}

}  // namespace

uint64_t Reader::read_direct(uint64_t offset, void* out, uint64_t bytes) const {
  auto* p = static_cast<uint8_t*>(out);
  Hash h;
  auto buffered = [&](uint64_t from) {
    read_at(offset + from, p + from, bytes - from);
    h.add(p + from, bytes - from);
    return h.value();
  };
  if (direct_fd_ < 0 || offset % kDirectAlign != 0) return buffered(0);
  const uint64_t whole = bytes / kDirectAlign * kDirectAlign;
  uint64_t done = 0;
  if (reinterpret_cast<uintptr_t>(p) % kDirectAlign == 0 && whole > 0) {
    if (!pread_direct(offset, p, whole, whole)) return buffered(0);
    h.add(p, whole);
    done = whole;
  }
  // The rest (all of it for unaligned memory; the tail under 4 KiB for
  // aligned) through this thread's buffer, the last piece rounded up.
  constexpr uint64_t kPiece = uint64_t{4} << 20;
  thread_local std::unique_ptr<uint8_t, void (*)(void*)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, kPiece)), std::free);
  if (buf == nullptr) return buffered(done);
  while (done < bytes) {
    const uint64_t n = std::min(kPiece, bytes - done);
    const uint64_t rounded = (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    if (!pread_direct(offset + done, buf.get(), rounded, n)) return buffered(done);
    copy_hashed(p + done, buf.get(), n, h);
    done += n;
  }
  return h.value();
}

void Reader::read_at(uint64_t offset, void* out, uint64_t bytes) const {
  auto* p = static_cast<uint8_t*>(out);
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, p + done, std::min<uint64_t>(bytes - done, uint64_t{1} << 30),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      throw Error(Code::data_loss, "checkpoint: " + path_ + ": truncated: wanted " + std::to_string(bytes) +
                                       " bytes at " + std::to_string(offset) + ", got " +
                                       std::to_string(done) +
                                       (err ? std::string(" (") + std::strerror(err) + ")" : std::string()));
    }
    done += static_cast<uint64_t>(n);
  }
}

void read_at(const std::string& path, uint64_t offset, void* out, uint64_t bytes) {
  Reader(path).read_at(offset, out, bytes);
}

void sync_dir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) os_fail("cannot open folder", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) os_fail("fsync of folder", path, err);
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error(Code::unavailable, "checkpoint: cannot make folder " + path + ": " + ec.message());
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

void rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) os_fail("cannot rename " + from + " to", to, errno);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

}  // namespace sigma::checkpoint::io
