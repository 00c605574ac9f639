// Internal: the on-disk layout and the manifest, as plain structs. decode()
// is the only reader of untrusted manifest bytes: FlatBuffers verifier
// first, then every size and relation bounded before anything is allocated.
#pragma once

#include <sigma/checkpoint.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::checkpoint::format {

constexpr uint32_t kVersion = 1;
constexpr const char* kManifest = "manifest.sgck";
constexpr const char* kData = "data.bin";
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxChunkBytes = uint64_t{256} << 20;

enum Codec : uint8_t { kShuffleZstd = 0, kXorShuffleZstd = 1, kSameAsBase = 2 };

struct Chunk {
  uint64_t offset = 0, raw_size = 0;
  uint8_t codec = kShuffleZstd;
  uint64_t data_offset = 0, stored_size = 0, raw_xxh3 = 0, stored_xxh3 = 0;
};

struct Tensor {
  std::string name;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::vector<int64_t> shape;
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
};

std::vector<uint8_t> encode(const Manifest& m);
// Throws Error(data_loss) "checkpoint: <path>: <check>".
Manifest decode(const std::vector<uint8_t>& bytes, const std::string& path);

// product(shape) * element size, or throws Error(invalid_argument / data_loss
// via `what`) on a negative dimension or overflow.
uint64_t tensor_bytes(hal_dtype_t dtype, const std::vector<int64_t>& shape, const std::string& what, Code code);

// Layout below the checkpoint root: JOB/step-<20 digits>/rank-<5 digits>/.
std::string job_dir(const Options& o);
std::string step_dir(const std::string& job_dir, uint64_t step);
std::string shard_dir(const std::string& job_dir, uint64_t step, uint32_t rank);
// Parses "step-000...42" -> 42; false for anything else.
bool parse_step(const std::string& name, uint64_t& step);
bool parse_rank(const std::string& name, uint32_t& rank);

}  // namespace sigma::checkpoint::format
