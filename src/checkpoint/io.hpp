// Internal: the file operations of the checkpoint engine. Every failure is
// thrown as Error(unavailable) naming the path and the OS's reason; durable
// means written, fsync'ed, and the folder entry fsync'ed too.
#pragma once

#include <sigma/error.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::checkpoint::io {

// A file being written; closes (without sync) on destruction.
class Writer {
 public:
  explicit Writer(std::string path);  // creates or truncates
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  void write(const void* data, uint64_t bytes);
  uint64_t size() const { return size_; }
  void sync_and_close();  // fsync, close

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A file open for reading at offsets from many threads at once (pread).
class Reader {
 public:
  explicit Reader(std::string path);  // Error(data_loss) when it cannot be opened
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  // Exactly `bytes` at `offset`; a short read is Error(data_loss) "truncated".
  void read_at(uint64_t offset, void* out, uint64_t bytes) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

void write_file(const std::string& path, const void* data, uint64_t bytes);  // durable
// The whole file, refusing files larger than max_bytes (Error(data_loss)).
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes);
// `bytes` bytes at `offset` of an open-by-path file; short reads are data_loss.
void read_at(const std::string& path, uint64_t offset, void* out, uint64_t bytes);
uint64_t file_size(const std::string& path);  // data_loss when missing
void sync_dir(const std::string& path);
void make_dirs(const std::string& path);
void remove_tree(const std::string& path);  // best effort
// rename(2): atomic within a file system.
void rename(const std::string& from, const std::string& to);
bool exists(const std::string& path);
std::vector<std::string> list_dir(const std::string& path);  // names, no . and ..

}  // namespace sigma::checkpoint::io
