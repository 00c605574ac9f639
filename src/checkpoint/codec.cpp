#include "codec.hpp"

#include <sigma/kernels.hpp>

#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <ctime>
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

// Keeps a sample's hashes from being optimised away (they are timed, not
// used).
void benchmark_keep(uint64_t h) {
  static std::atomic<uint64_t> sink{0};
  sink.store(h, std::memory_order_relaxed);
}

ZSTD_DCtx* dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
  return d.get();
}

// Shuffles (with a base, XORs) `bytes` of `raw` into `out` and compresses
// them into `frame`; returns the frame's size.
size_t compress(const uint8_t* raw, uint64_t bytes, uint32_t elem_size, const uint8_t* base, int level,
                uint8_t* tmp, std::vector<uint8_t>& frame) {
  const uint64_t n = bytes / elem_size;
  if (base != nullptr)
    kernels::shuffle_xor_bytes(raw, base, tmp, n, elem_size);
  else
    kernels::shuffle_bytes(raw, tmp, n, elem_size);
  // Grown, never shrunk: a reused frame is not zero-filled again.
  if (frame.size() < ZSTD_compressBound(bytes)) frame.resize(ZSTD_compressBound(bytes));
  const size_t z = ZSTD_compressCCtx(cctx(), frame.data(), frame.size(), tmp, bytes, level);
  if (ZSTD_isError(z)) throw Error(Code::internal, std::string("checkpoint: zstd: ") + ZSTD_getErrorName(z));
  return z;
}

// This thread's CPU time: a sample's rate is the codec's, not what a
// preemption in the middle of it makes it look like (the model multiplies
// it by the threads that code at once).
double thread_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The first kSampleBytes of the chunk (whole elements) encoded and decoded
// as the chunk would be, each way timed, hashes included.
constexpr uint64_t kSampleBytes = 64 << 10;
format::ChunkSample measure(const uint8_t* raw, uint64_t bytes, uint32_t elem_size, const uint8_t* base,
                            int level) {
  const uint64_t n = std::min(bytes, std::max<uint64_t>(kSampleBytes / elem_size, 1) * elem_size);
  thread_local std::vector<uint8_t> frame, tmp, back;
  thread_local int warmed_level = INT32_MIN;
  // Memory and contexts made before the clock starts (zstd sizes a
  // context's tables on its first frame): a thread's first sample would
  // otherwise time page faults, not the codec.
  tmp.resize(n);
  back.resize(n);
  if (frame.size() < ZSTD_compressBound(n)) frame.resize(ZSTD_compressBound(n));
  if (warmed_level != level) {
    const size_t z = compress(raw, n, elem_size, base, level, tmp.data(), frame);
    (void)ZSTD_decompressDCtx(dctx(), back.data(), n, frame.data(), z);
    warmed_level = level;
  }
  const double t0 = thread_seconds();
  const size_t z = compress(raw, n, elem_size, base, level, tmp.data(), frame);
  benchmark_keep(kernels::checksum(frame.data(), z) ^ kernels::checksum(raw, n));
  const double t1 = thread_seconds(), enc = t1 - t0;
  benchmark_keep(kernels::checksum(frame.data(), z));
  const size_t d = ZSTD_decompressDCtx(dctx(), tmp.data(), n, frame.data(), z);
  if (ZSTD_isError(d) || d != n) throw Error(Code::internal, "checkpoint: zstd refused its own sample");
  if (base != nullptr)
    kernels::unshuffle_xor_bytes(tmp.data(), base, back.data(), n / elem_size, elem_size);
  else
    kernels::unshuffle_bytes(tmp.data(), back.data(), n / elem_size, elem_size);
  benchmark_keep(kernels::checksum(back.data(), n));
  const double dec = thread_seconds() - t1;
  const double bn = static_cast<double>(n);
  return {static_cast<float>(static_cast<double>(z) / bn), static_cast<float>(enc > 0 ? bn / enc : 0),
          static_cast<float>(dec > 0 ? bn / dec : 0), 0};
}

}  // namespace

format::Chunk encode(const uint8_t* raw, uint64_t bytes, uint32_t elem_size, const uint8_t* base,
                     uint64_t base_xxh3, double base_ratio, const Plan& plan, std::vector<uint8_t>& frame) {
  format::Chunk c;
  c.raw_size = bytes;
  c.raw_xxh3 = kernels::checksum(raw, bytes);
  if (base != nullptr && c.raw_xxh3 == base_xxh3) {
    c.codec = format::kSameAsBase;
    return c;
  }
  bool zstd = plan.mode == Compression::always;
  if (plan.mode == Compression::automatic) {
    c.sample = measure(raw, bytes, elem_size, base, plan.level);
    c.sample.base = base != nullptr ? static_cast<float>(base_ratio) : 0.0f;
    const choice::Sample s{c.sample.ratio, c.sample.encode, c.sample.decode, c.sample.base};
    zstd = choice::compress(plan.mode, choice::costs(s, plan.disk, plan.threads));
  }
  if (!zstd) {
    c.codec = format::kRaw;
    c.stored_size = bytes;
    c.stored_xxh3 = c.raw_xxh3;
    return c;
  }
  auto& tmp = scratch(bytes);
  c.codec = base != nullptr ? format::kXorShuffleZstd : format::kShuffleZstd;
  c.stored_size = compress(raw, bytes, elem_size, base, plan.level, tmp.data(), frame);
  c.stored_xxh3 = kernels::checksum(frame.data(), c.stored_size);
  return c;
}

void check_raw_hash(const format::Chunk& c, uint64_t xxh3, const std::string& where) {
  if (xxh3 != c.raw_xxh3)
    throw Error(Code::data_loss, "checkpoint: " + where + ": xxh3 of the stored bytes does not match");
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
