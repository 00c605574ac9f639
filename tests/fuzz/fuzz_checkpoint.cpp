// libFuzzer target for everything that reads checkpoint bytes from disk: the
// FlatBuffers manifest (verifier, bounds), the chunk reader (zstd frames,
// hashes, unshuffle), a step's global manifest and the safetensors
// importer. Input: a 4-byte length, that many manifest bytes, then the rest.
//  - Manifest bytes that carry the step manifest's identifier (SGCS) are a
//    step's global manifest (written as step 7's global.sgcs) and the rest
//    is rank 0's shard manifest: verify_step checks the two agree.
//  - Otherwise they are rank 0's shard manifest and the rest its data file,
//    verified whole; the same bytes as a global manifest must be refused.
// The whole input also goes to the safetensors parser. Any input must load
// or be refused with sigma::Error (data_loss / invalid_argument), never
// crash, hang or allocate without bound. Each parser that accepts an input
// says so through sigma_fuzz_accepted (the replay checks the valid seeds).
#include <sigma/checkpoint.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

void write(const std::string& path, const uint8_t* p, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (n) std::fwrite(p, 1, n, f);
  std::fclose(f);
}

const std::string& shard_dir() {
  static const std::string d = [] {
    const std::string root =
        std::filesystem::temp_directory_path().string() + "/sigma-fuzz-ckpt-" + std::to_string(::getpid());
    const std::string s = root + "/job/step-00000000000000000007/rank-00000";
    std::filesystem::create_directories(s);
    return s;
  }();
  return d;
}

}  // namespace

// The replay defines the strong one; under libFuzzer nothing listens.
extern "C" __attribute__((weak)) void sigma_fuzz_accepted(const char*) {}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4 || size > (1u << 20)) return 0;
  const uint32_t mlen = data[0] | data[1] << 8 | data[2] << 16 | static_cast<uint32_t>(data[3]) << 24;
  const size_t m = std::min<size_t>(mlen, size - 4);
  const uint8_t* manifest = data + 4;
  const bool step_manifest = m >= 8 && std::memcmp(manifest + 4, "SGCS", 4) == 0;
  const std::string step_dir = shard_dir().substr(0, shard_dir().rfind('/'));
  write(step_dir + "/global.sgcs", manifest, m);
  write(shard_dir() + "/manifest.sgck", manifest + m, size - 4 - m);
  if (step_manifest) {
    write(shard_dir() + "/data.bin", nullptr, 0);
  } else {
    write(shard_dir() + "/manifest.sgck", manifest, m);
    write(shard_dir() + "/data.bin", manifest + m, size - 4 - m);
    try {
      sigma::checkpoint::verify(shard_dir());
      sigma_fuzz_accepted("shard");
    } catch (const sigma::Error& e) {
      if (e.code() != sigma::Code::data_loss && e.code() != sigma::Code::invalid_argument) __builtin_trap();
    }
  }
  try {
    sigma::checkpoint::verify_step(step_dir, /*shards_too=*/false);
    sigma_fuzz_accepted("step");
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::data_loss && e.code() != sigma::Code::invalid_argument) __builtin_trap();
  }
  try {
    std::map<std::string, std::string> meta;
    sigma::checkpoint::parse_safetensors(data, size, "fuzz.safetensors", &meta);
    sigma_fuzz_accepted("safetensors");
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::invalid_argument) __builtin_trap();
  }
  return 0;
}
