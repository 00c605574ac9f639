// One tensor of two shards compared element by element, both decoded chunk
// by chunk side by side (sigma-ckpt diff): memory stays two chunks.
#include <sigma/checkpoint.hpp>
#include <sigma/hal.hpp>

#include "checkpoint/shard.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sigma::checkpoint {

namespace {

const format::Tensor& tensor_of(const shard::Shard& s, const std::string& name) {
  for (const auto& t : s.manifest.tensors)
    if (t.name == name) return t;
  throw Error(Code::invalid_argument, "checkpoint: " + s.path + " has no tensor '" + name + "'");
}

// Compared with one memcmp before any element is looked at; a multiple of
// every element size.
constexpr uint64_t kBlockBytes = 4096;

// The bytes a cursor has decoded and not yet compared.
struct Pending {
  shard::ChunkCursor cursor;
  const std::vector<uint8_t>* raw = nullptr;
  uint64_t used = 0;
  // Bytes ready at raw->data() + used; decodes the next chunk when none are.
  uint64_t ready() {
    if (raw != nullptr && used < raw->size()) return raw->size() - used;
    uint64_t offset = 0;
    if (!cursor.next(&offset, &raw)) return 0;
    used = 0;
    return raw->size();
  }
};

}  // namespace

TensorDiff diff_tensor(const std::string& shard_a, const std::string& shard_b, const std::string& name) {
  const shard::Shard sa = shard::open(shard_a), sb = shard::open(shard_b);
  const auto base_a = shard::open_base(sa), base_b = shard::open_base(sb);
  const format::Tensor &ta = tensor_of(sa, name), &tb = tensor_of(sb, name);
  if (ta.dtype != tb.dtype || ta.shape != tb.shape)
    throw Error(Code::invalid_argument,
                "checkpoint: tensor '" + name + "' has another dtype or shape in " + shard_b);
  const uint64_t es = hal::dtype_size(ta.dtype);
  Pending a{shard::ChunkCursor(sa, ta, base_a.get())}, b{shard::ChunkCursor(sb, tb, base_b.get())};
  TensorDiff d;
  d.elements = ta.bytes / es;
  double sum_sq = 0;
  // Chunks are whole elements, so the common run of two is too.
  for (uint64_t na = a.ready(), nb = b.ready(); na > 0 && nb > 0; na = a.ready(), nb = b.ready()) {
    const uint64_t n = std::min(na, nb);
    const uint8_t *pa = a.raw->data() + a.used, *pb = b.raw->data() + b.used;
    // Equal blocks are skipped whole: one memcmp per block, not per element
    // (a 2 GiB tensor of equal chunks was half a billion calls).
    for (uint64_t block = 0; block < n; block += kBlockBytes) {
      const uint64_t end = std::min(n, block + kBlockBytes);
      if (std::memcmp(pa + block, pb + block, end - block) == 0) continue;
      for (uint64_t i = block; i < end; i += es) {
        if (std::memcmp(pa + i, pb + i, es) == 0) continue;
        ++d.changed;
        const double x = hal::element_as_double(pa + i, ta.dtype) - hal::element_as_double(pb + i, ta.dtype);
        d.max_abs = std::max(d.max_abs, std::fabs(x));
        sum_sq += x * x;
      }
    }
    a.used += n;
    b.used += n;
  }
  d.rms = d.elements ? std::sqrt(sum_sq / static_cast<double>(d.elements)) : 0.0;
  return d;
}

}  // namespace sigma::checkpoint
