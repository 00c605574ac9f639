// libFuzzer target for everything that reads checkpoint bytes from disk: the
// FlatBuffers manifest (verifier, bounds), the chunk reader (zstd frames,
// hashes, unshuffle), a step's global manifest and the safetensors
// importer. Input: a 4-byte length, that many manifest bytes, the rest the
// data file; the manifest bytes are also the step's global manifest, and
// the whole input goes to the safetensors parser. Any input must load or be refused with
// sigma::Error (data_loss / invalid_argument), never crash, hang or
// allocate without bound.
#include <sigma/checkpoint.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4 || size > (1u << 20)) return 0;
  const uint32_t mlen = data[0] | data[1] << 8 | data[2] << 16 | static_cast<uint32_t>(data[3]) << 24;
  const size_t m = std::min<size_t>(mlen, size - 4);
  write(shard_dir() + "/manifest.sgck", data + 4, m);
  write(shard_dir() + "/data.bin", data + 4 + m, size - 4 - m);
  const std::string step_dir = shard_dir().substr(0, shard_dir().rfind('/'));
  write(step_dir + "/global.sgcs", data + 4, m);
  try {
    sigma::checkpoint::verify(shard_dir());
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::data_loss && e.code() != sigma::Code::invalid_argument) __builtin_trap();
  }
  try {
    sigma::checkpoint::verify_step(step_dir);
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::data_loss && e.code() != sigma::Code::invalid_argument) __builtin_trap();
  }
  try {
    std::map<std::string, std::string> meta;
    sigma::checkpoint::parse_safetensors(data, size, "fuzz.safetensors", &meta);
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::invalid_argument) __builtin_trap();
  }
  return 0;
}
