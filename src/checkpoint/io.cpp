#include "io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace sigma::checkpoint::io {
namespace {

[[noreturn]] void os_fail(const std::string& what, const std::string& path, int err) {
  throw Error(Code::unavailable, "checkpoint: " + what + " " + path + ": " + std::strerror(err));
}

}  // namespace

Writer::Writer(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) os_fail("cannot create", path_, errno);
}

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
}

void Writer::write(const void* data, uint64_t bytes) {
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
}

void Writer::sync_and_close() {
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
  return static_cast<uint64_t>(st.st_size);
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes) {
  const uint64_t size = file_size(path);
  if (size > max_bytes)
    throw Error(Code::data_loss, "checkpoint: " + path + ": " + std::to_string(size) + " bytes, more than the " +
                                     std::to_string(max_bytes) + " allowed");
  std::vector<uint8_t> out(size);
  read_at(path, 0, out.data(), size);
  return out;
}

Reader::Reader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(Code::data_loss, "checkpoint: " + path_ + ": cannot open (" + std::strerror(errno) + ")");
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
                                       " bytes at " + std::to_string(offset) + ", got " + std::to_string(done) +
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
