// Internal: the on-disk layout and the manifest, as plain structs. decode()
// is the only reader of untrusted manifest bytes: FlatBuffers verifier
// first, then every size and relation bounded before anything is allocated.
#pragma once

#include <sigma/checkpoint.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::checkpoint::format {

// The version this library writes, and the oldest it reads. 1: zstd
// chunks only; 2: adds raw chunks and the compression choice's record.
constexpr uint32_t kVersion = 2;
constexpr uint32_t kOldestVersion = 1;
constexpr const char* kManifest = "manifest.sgck";
constexpr const char* kData = "data.bin";
constexpr const char* kStepManifest = "global.sgcs";
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxChunkBytes = uint64_t{256} << 20;

enum Codec : uint8_t { kShuffleZstd = 0, kXorShuffleZstd = 1, kSameAsBase = 2, kRaw = 3 };
// Raw chunks start at multiples of this in the data file (direct I/O).
constexpr uint64_t kRawAlign = 4096;

// What the automatic choice measured of a chunk (compression_choice.hpp).
struct ChunkSample {
  float ratio = 0, encode = 0, decode = 0, base = 0;
};

struct Chunk {
  uint64_t offset = 0, raw_size = 0;
  uint8_t codec = kShuffleZstd;
  uint64_t data_offset = 0, stored_size = 0, raw_xxh3 = 0, stored_xxh3 = 0;
  ChunkSample sample;
};

// How the writer chose the codecs.
struct CompressionRecord {
  Compression mode = Compression::always;  // format 1 compressed every chunk
  double disk_read = 0, disk_write = 0;
  uint32_t threads = 0;
};

// A shard's record of a tensor: what it is, and where its bytes are.
struct Tensor : TensorSpec {
  uint64_t bytes = 0;
  std::vector<Chunk> chunks;
};

struct Manifest {
  uint32_t format_version = kVersion;
  std::string job;
  uint64_t step = 0;
  uint32_t rank = 0, world = 1;
  int64_t base_step = -1;
  uint64_t created_unix_ns = 0;
  std::string data_file = kData;
  uint64_t data_bytes = 0;
  std::vector<Tensor> tensors;
  Metadata meta;
  CompressionRecord compression;
};

std::vector<uint8_t> encode(const Manifest& m);
// Throws Error(data_loss) "checkpoint: <path>: <check>".
Manifest decode(const std::vector<uint8_t>& bytes, const std::string& path);

// The global manifest of a step.
struct ShardRef {
  uint32_t rank = 0;
  uint64_t manifest_bytes = 0, manifest_xxh3 = 0, data_bytes = 0;
  int64_t base_step = -1;
};
struct Piece {
  uint32_t rank = 0;
  int64_t offset = 0, length = 0;  // along split_dim; 0, 0 unless split
};
struct GlobalTensor {
  std::string name;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  Layout layout = Layout::local;
  int32_t split_dim = 0;
  std::vector<int64_t> global_shape;
  std::vector<Piece> pieces;  // split: sorted by offset, tiling the dimension
};
struct StepManifest {
  uint32_t format_version = kVersion;
  std::string job;
  uint64_t step = 0;
  uint32_t world = 1;
  uint64_t created_unix_ns = 0;
  std::vector<ShardRef> shards;  // one per rank, in rank order
  std::vector<GlobalTensor> tensors;
};
std::vector<uint8_t> encode_step(const StepManifest& m);
// Verifier, then every relation: one shard per rank, names unique, pieces
// of known ranks, split pieces tiling the dimension. Error(data_loss).
StepManifest decode_step(const std::vector<uint8_t>& bytes, const std::string& path);
// Checks the relations decode_step() checks (also used before writing one).
void check_step(const StepManifest& m, const std::string& path);

// product(shape) * element size, or throws Error(invalid_argument / data_loss
// via `what`) on a negative dimension or overflow.
uint64_t tensor_bytes(hal_dtype_t dtype, const std::vector<int64_t>& shape, const std::string& what,
                      Code code);

// Checks a tensor's layout fields against its shape: throws Error(code)
// "<what>: <reason>". A replicated tensor's global shape is its shape.
void check_layout(Layout layout, int32_t split_dim, int64_t split_offset, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& global_shape, hal_dtype_t dtype, const std::string& what,
                  Code code);

// Layout below the checkpoint root: JOB/step-<20 digits>/rank-<5 digits>/.
std::string job_dir(const Options& o);
std::string step_dir(const std::string& job_dir, uint64_t step);
std::string shard_dir(const std::string& job_dir, uint64_t step, uint32_t rank);
// Parses "step-000...42" -> 42; false for anything else.
bool parse_step(const std::string& name, uint64_t& step);
bool parse_rank(const std::string& name, uint32_t& rank);

}  // namespace sigma::checkpoint::format
