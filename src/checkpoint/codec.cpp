#include "codec.hpp"

#include <sigma/kernels.hpp>

#include <zstd.h>

#include <cstring>
#include <memory>

namespace sigma::checkpoint::codec {
namespace {

// Per-thread scratch for the shuffled bytes: chunks are encoded on many
// oneTBB threads at once.
std::vector<uint8_t>& scratch(uint64_t bytes) {
  thread_local std::vector<uint8_t> s;
  if (s.size() < bytes) s.resize(bytes);
  return s;
}

// One zstd context per thread for each direction: ZSTD_compress() would
// build (and page in) a fresh one for every chunk.
ZSTD_CCtx* cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> c(ZSTD_createCCtx(), ZSTD_freeCCtx);
  return c.get();
}
ZSTD_DCtx* dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
  return d.get();
}

}  // namespace

format::Chunk encode(const uint8_t* raw, uint64_t bytes, uint32_t elem_size, const uint8_t* base,
                     uint64_t base_xxh3, int level, std::vector<uint8_t>& frame) {
  format::Chunk c;
  c.raw_size = bytes;
  c.raw_xxh3 = kernels::checksum(raw, bytes);
  if (base != nullptr && c.raw_xxh3 == base_xxh3) {
    c.codec = format::kSameAsBase;
    return c;
  }
  auto& tmp = scratch(bytes);
  const uint64_t n = bytes / elem_size;
  if (base != nullptr) {
    kernels::shuffle_xor_bytes(raw, base, tmp.data(), n, elem_size);
    c.codec = format::kXorShuffleZstd;
  } else {
    kernels::shuffle_bytes(raw, tmp.data(), n, elem_size);
    c.codec = format::kShuffleZstd;
  }
  // Grown, never shrunk: a reused frame is not zero-filled again.
  if (frame.size() < ZSTD_compressBound(bytes)) frame.resize(ZSTD_compressBound(bytes));
  const size_t z = ZSTD_compressCCtx(cctx(), frame.data(), frame.size(), tmp.data(), bytes, level);
  if (ZSTD_isError(z)) throw Error(Code::internal, std::string("checkpoint: zstd: ") + ZSTD_getErrorName(z));
  c.stored_size = z;
  c.stored_xxh3 = kernels::checksum(frame.data(), z);
  return c;
}

void decode(const format::Chunk& c, const uint8_t* stored, uint32_t elem_size, const uint8_t* base_raw,
            uint8_t* out, const std::string& where) {
  auto fail = [&](const std::string& check) {
    throw Error(Code::data_loss, "checkpoint: " + where + ": " + check);
  };
  if (c.codec == format::kSameAsBase) {
    if (base_raw == nullptr) fail("unchanged chunk but no base to read it from");
    if (kernels::checksum(base_raw, c.raw_size) != c.raw_xxh3)
      fail("the base's chunk does not have the recorded xxh3");
    std::memcpy(out, base_raw, c.raw_size);
    return;
  }
  if (kernels::checksum(stored, c.stored_size) != c.stored_xxh3)
    fail("xxh3 of the stored bytes does not match");
  const unsigned long long frame = ZSTD_getFrameContentSize(stored, c.stored_size);
  if (frame != c.raw_size)
    fail("the zstd frame declares " + std::to_string(frame) + " bytes, not " + std::to_string(c.raw_size));
  auto& tmp = scratch(c.raw_size);
  const size_t z = ZSTD_decompressDCtx(dctx(), tmp.data(), c.raw_size, stored, c.stored_size);
  if (ZSTD_isError(z) || z != c.raw_size)
    fail(std::string("zstd refused the frame: ") + (ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short"));
  const uint64_t n = c.raw_size / elem_size;
  if (c.codec == format::kXorShuffleZstd) {
    if (base_raw == nullptr) fail("delta chunk but no base");
    kernels::unshuffle_xor_bytes(tmp.data(), base_raw, out, n, elem_size);
  } else {
    kernels::unshuffle_bytes(tmp.data(), out, n, elem_size);
  }
  if (kernels::checksum(out, c.raw_size) != c.raw_xxh3) fail("xxh3 of the restored bytes does not match");
}

}  // namespace sigma::checkpoint::codec
