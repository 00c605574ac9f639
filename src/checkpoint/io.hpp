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
//
// `direct`: for large files written once (checkpoint data). The bytes go
// through an aligned buffer straight to the disk (O_DIRECT, 8 MiB writes):
// no page-cache pages to allocate, zero and copy into, which on a virtual
// machine costs more CPU than compressing the data, and the disk streams
// while the next chunks are encoded. Where the file system refuses O_DIRECT
// (tmpfs, ...) it falls back to buffered writes with streaming writeback.
class Writer {
 public:
  explicit Writer(std::string path, bool direct = false);  // creates or truncates
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  void write(const void* data, uint64_t bytes);
  // Zeros up to `offset` (>= size()): where the next bytes must start.
  void pad_to(uint64_t offset);
  uint64_t size() const { return size_; }
  // Bytes handed to the file system so far (direct writes hold up to one
  // buffer back).
  uint64_t written() const { return direct_ ? flushed_ : size_; }
  // Whether the bytes go past the page cache (O_DIRECT was taken).
  bool direct() const { return direct_; }
  // Direct: hands the buffer's aligned part to the file system now.
  void flush_aligned();
  void sync_and_close();  // fsync, close

 private:
  void write_direct(const uint8_t* p, uint64_t bytes);
  void flush_direct(uint64_t bytes);
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t started_ = 0, waited_ = 0;  // writeback started / finished up to
  bool direct_ = false;
  uint8_t* buf_ = nullptr;  // direct: aligned, kDirectBuffer bytes
  uint64_t buf_len_ = 0, flushed_ = 0;
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
  // The same past the page cache (O_DIRECT) for an `offset` on a 4 KiB
  // boundary, as raw chunks are: the device's DMA goes straight into `out`
  // where it is aligned too, else through a 4 MiB buffer of this thread's.
  // Buffered (read_at) where the file system refuses direct reads. On a
  // virtual machine this reads at the device's rate; buffered reads pay a
  // page-cache page per 4 KiB on top. Returns the bytes' xxh3-64 (seed 0),
  // taken piece by piece while each is in cache.
  uint64_t read_direct(uint64_t offset, void* out, uint64_t bytes) const;
  const std::string& path() const { return path_; }

 private:
  // Up to `bytes` at an aligned `offset` into aligned `out` (a multiple of
  // the alignment long); false where the file system refuses.
  bool pread_direct(uint64_t offset, uint8_t* out, uint64_t bytes, uint64_t need) const;
  std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;  // O_DIRECT, or -1 where the file system refuses it
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
