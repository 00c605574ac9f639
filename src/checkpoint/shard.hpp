// Internal: writing one rank's shard (chunks encoded on oneTBB, frames
// appended in order, manifest last, atomic commit) and reading one back.
#pragma once

#include "format.hpp"

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sigma::checkpoint::shard {

// One tensor's bytes in host memory, borrowed.
struct HostTensor : TensorSpec {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

// Host memory for snapshots: 2 MiB aligned and offered to transparent huge
// pages, because a snapshot touches hundreds of MiB at once and a 4 KiB
// page fault per page costs more than the copy itself.
class Bytes {
 public:
  Bytes() = default;
  explicit Bytes(uint64_t n);
  // A moved-from Bytes is empty (size 0), not a size without memory.
  Bytes(Bytes&& o) noexcept : p_(std::move(o.p_)), n_(std::exchange(o.n_, 0)) {}
  Bytes& operator=(Bytes&& o) noexcept {
    p_ = std::move(o.p_);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }
  uint8_t* data() const { return p_.get(); }
  uint64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> p_;
  uint64_t n_ = 0;
};

// Offers the 2 MiB-aligned interior of [p, p + n) to transparent huge
// pages (a hint; nothing outside the range is touched): memory a restore
// fills for the first time then faults 2 MiB at a time, not 4 KiB, which
// on a virtual machine costs more than the copy itself.
void offer_huge_pages(void* p, uint64_t n);

// What differential checkpoints are taken against: the base's raw bytes
// (owned) and chunk hashes, per tensor.
struct Base {
  uint64_t step = 0;
  uint64_t chunk_bytes = 0;
  struct Tensor {
    hal_dtype_t dtype;
    Bytes bytes;
    std::vector<uint64_t> hashes;  // per chunk, raw xxh3
    std::vector<uint64_t> stored;  // per chunk, bytes stored (what a delta's restore reads of it)
  };
  std::map<std::string, Tensor> tensors;
};

// Writes and commits the shard of `step`. With `base`, chunks of tensors the
// base has with the same dtype and size are differential. Each chunk's codec
// follows o.compression (the automatic choice weighs a sample of it against
// the device's rates). Fills `records` (per tensor, its chunks as written)
// for the caller to keep what the next base needs.
// With `copy_to`, tensor i's raw bytes are also copied to (*copy_to)[i]
// where that is not NULL, chunk by chunk while each is in cache (the
// engine's next base). On any failure removes what it wrote and throws.
SaveResult write(const Options& o, uint64_t step, const std::vector<HostTensor>& tensors,
                 const Metadata& meta, const Base* base, std::vector<std::vector<format::Chunk>>* records,
                 const std::vector<uint8_t*>* copy_to = nullptr);

struct Shard {
  std::string path;
  format::Manifest manifest;
};

// The manifest of the shard at `path`, verified, and its data file's size
// checked. Throws Error(data_loss).
Shard open(const std::string& path);
// The same from manifest bytes the caller has read already.
Shard open(const std::string& path, const std::vector<uint8_t>& manifest_bytes);
// The base shard a differential one needs.
std::string base_path(const Shard& s);
// That base, opened and verified like `s`; NULL when `s` is a base.
std::unique_ptr<Shard> open_base(const Shard& s);
// Decodes tensor `t` of `s` into `out` (t.bytes bytes), every hash checked;
// `base` must be open when `s` is differential.
void read_tensor(const Shard& s, const format::Tensor& t, const Shard* base, uint8_t* out);
// The same, keeping nothing: every chunk decoded and its hashes checked in
// a chunk-sized buffer per thread, whatever the tensor's size.
void check_tensor(const Shard& s, const format::Tensor& t, const Shard* base);
// Decodes `t` chunk by chunk, in order, each handed to `sink(offset, bytes,
// size)`: memory stays one chunk whatever the tensor's size.
using ChunkSink = std::function<void(uint64_t offset, const uint8_t* bytes, uint64_t size)>;
void stream_tensor(const Shard& s, const format::Tensor& t, const Shard* base, const ChunkSink& sink);
// The chunks of one tensor decoded one at a time, in order, on the
// caller's thread: two tensors can be walked side by side (diff) in a
// chunk's memory each. The shard, tensor and base must outlive it.
class ChunkCursor {
 public:
  ChunkCursor(const Shard& s, const format::Tensor& t, const Shard* base);
  ~ChunkCursor();
  ChunkCursor(const ChunkCursor&) = delete;
  ChunkCursor& operator=(const ChunkCursor&) = delete;
  // The next chunk: its offset in the tensor and its raw bytes (valid until
  // the next call), every hash checked; false after the last.
  bool next(uint64_t* offset, const std::vector<uint8_t>** raw);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Checks that the bytes of the data file outside every chunk are the zeros
// the writer pads raw chunks to their 4 KiB boundary with: damage anywhere
// in the file is seen. Throws Error(data_loss) naming the offset.
void check_padding(const Shard& s);
// Reads tensor `t`'s stored bytes (and, for a differential shard, those of
// the base chunks it needs) and checks their hashes, decoding nothing: what
// lets a restore decode straight into the caller's memory once every
// tensor's bytes are known good. Throws Error(data_loss) like read_tensor.
void verify_stored(const Shard& s, const format::Tensor& t, const Shard* base);

}  // namespace sigma::checkpoint::shard
