#include "io.hpp"

#include "regular_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

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
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
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
