#include "format.hpp"

#include "checkpoint_generated.h"

#include <sigma/kernels.hpp>

#include <zstd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

namespace sigma::checkpoint::format {
namespace {

namespace fb = sigma::ckpt::fb;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(Code::data_loss, "checkpoint: " + path + ": " + what);
}

void check_version(uint32_t v, const std::string& path) {
  if (v < kOldestVersion || v > kVersion)
    bad(path, "format version " + std::to_string(v) + ", this library reads " +
                  std::to_string(kOldestVersion) + " to " + std::to_string(kVersion));
}

// One chunk record of tensor `x` (whose earlier chunks cover [0, next)) of
// manifest `m`, every field bounded against the tensor, its codec and the
// data file.
Chunk read_chunk(const fb::Chunk& c, const Tensor& x, const Manifest& m, uint64_t next,
                 const std::string& path) {
  Chunk k{c.offset(),
          c.raw_size(),
          static_cast<uint8_t>(c.codec()),
          c.data_offset(),
          c.stored_size(),
          c.raw_xxh3(),
          c.stored_xxh3(),
          {c.sample_ratio(), c.sample_encode(), c.sample_decode(), c.sample_base()}};
  const std::string where = "tensor " + x.name + " chunk " + std::to_string(x.chunks.size());
  if (k.offset != next)
    bad(path, where + ": starts at " + std::to_string(k.offset) + ", expected " + std::to_string(next));
  if (k.raw_size == 0 || k.raw_size > kMaxChunkBytes || k.raw_size > x.bytes - k.offset)
    bad(path, where + ": raw size " + std::to_string(k.raw_size) + " out of bounds");
  if (k.raw_size % hal::dtype_size(x.dtype) != 0) bad(path, where + ": not a whole number of elements");
  const uint8_t newest = m.format_version >= 2 ? kRaw : kSameAsBase;
  if (k.codec > newest)
    bad(path, where + ": unknown codec " + std::to_string(k.codec) + " in format " +
                  std::to_string(m.format_version));
  if ((k.codec == kSameAsBase) != (k.stored_size == 0))
    bad(path, where + ": stored size does not fit its codec");
  if (k.codec == kRaw && (k.stored_size != k.raw_size || k.stored_xxh3 != k.raw_xxh3))
    bad(path, where + ": a raw chunk whose stored size or hash is not its raw one");
  if (m.base_step < 0 && k.codec != kShuffleZstd && k.codec != kRaw)
    bad(path, where + (k.codec == kSameAsBase ? ": refers to a base that a base lacks"
                                              : ": a delta chunk in a base checkpoint"));
  if (k.stored_size > ZSTD_compressBound(k.raw_size) || k.data_offset > m.data_bytes ||
      k.stored_size > m.data_bytes - k.data_offset)
    bad(path, where + ": stored bytes [" + std::to_string(k.data_offset) + ", +" +
                  std::to_string(k.stored_size) + ") out of the data file's " + std::to_string(m.data_bytes));
  return k;
}

}  // namespace

uint64_t tensor_bytes(hal_dtype_t dtype, const std::vector<int64_t>& shape, const std::string& what,
                      Code code) {
  const uint64_t es = hal::dtype_size(dtype);
  if (es == 0) throw Error(code, what + ": unknown dtype " + std::to_string(dtype));
  unsigned __int128 n = es;
  for (int64_t d : shape) {
    if (d < 0) throw Error(code, what + ": negative dimension " + std::to_string(d));
    n *= static_cast<uint64_t>(d);
    if (n > (static_cast<unsigned __int128>(1) << 62)) throw Error(code, what + ": more than 2^62 bytes");
  }
  return static_cast<uint64_t>(n);
}

void check_layout(Layout layout, int32_t split_dim, int64_t split_offset, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& global_shape, hal_dtype_t dtype, const std::string& what,
                  Code code) {
  switch (layout) {
    case Layout::local:
      return;
    case Layout::replicated:
      if (global_shape != shape)
        throw Error(code, what + ": replicated, but its global shape is not its shape");
      return;
    case Layout::split:
      break;
    default:
      throw Error(code, what + ": unknown layout " + std::to_string(static_cast<int>(layout)));
  }
  if (shape.empty()) throw Error(code, what + ": a scalar cannot be split");
  if (global_shape.size() != shape.size())
    throw Error(code, what + ": global shape has " + std::to_string(global_shape.size()) +
                          " dimensions, the slice " + std::to_string(shape.size()));
  if (split_dim < 0 || static_cast<size_t>(split_dim) >= shape.size())
    throw Error(code, what + ": split dimension " + std::to_string(split_dim) + " out of range");
  tensor_bytes(dtype, global_shape, what + ": global shape", code);
  for (size_t i = 0; i < shape.size(); ++i)
    if (static_cast<int32_t>(i) != split_dim && shape[i] != global_shape[i])
      throw Error(code, what + ": dimension " + std::to_string(i) + " is " + std::to_string(shape[i]) +
                            ", the global shape's " + std::to_string(global_shape[i]) +
                            " (only the split one may differ)");
  const int64_t g = global_shape[static_cast<size_t>(split_dim)], n = shape[static_cast<size_t>(split_dim)];
  if (split_offset < 0 || n > g || split_offset > g - n)
    throw Error(code, what + ": slice [" + std::to_string(split_offset) + ", +" + std::to_string(n) +
                          ") outside the global dimension of " + std::to_string(g));
}

std::vector<uint8_t> encode(const Manifest& m) {
  flatbuffers::FlatBufferBuilder b(1 << 16);
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const auto& t : m.tensors) {
    std::vector<flatbuffers::Offset<fb::Chunk>> chunks;
    for (const auto& c : t.chunks)
      chunks.push_back(fb::CreateChunk(b, c.offset, c.raw_size, static_cast<fb::Codec>(c.codec),
                                       c.data_offset, c.stored_size, c.raw_xxh3, c.stored_xxh3,
                                       c.sample.ratio, c.sample.encode, c.sample.decode, c.sample.base));
    tensors.push_back(fb::CreateTensor(b, b.CreateString(t.name), static_cast<uint8_t>(t.dtype),
                                       b.CreateVector(t.shape), t.bytes, b.CreateVector(chunks),
                                       static_cast<fb::Layout>(t.layout), t.split_dim, t.split_offset,
                                       b.CreateVector(t.global_shape)));
  }
  std::vector<flatbuffers::Offset<fb::Entry>> extra;
  for (const auto& [k, v] : m.meta.extra)
    extra.push_back(fb::CreateEntry(b, b.CreateString(k), b.CreateString(v)));
  const auto meta = fb::CreateMeta(b, m.meta.step, m.meta.data_position, b.CreateVector(m.meta.rng_state),
                                   m.meta.loss_scale, b.CreateString(m.meta.guardrails_state),
                                   b.CreateString(m.meta.parallel_plan), b.CreateVector(extra));
  const auto root = fb::CreateManifest(
      b, m.format_version, b.CreateString(m.job), m.step, m.rank, m.world, m.base_step, m.created_unix_ns,
      b.CreateString(m.data_file), m.data_bytes, b.CreateVector(tensors), meta,
      fb::CreateCompression(b, static_cast<uint8_t>(m.compression.mode), m.compression.disk_read,
                            m.compression.disk_write, m.compression.threads));
  fb::FinishManifestBuffer(b, root);
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

namespace {

// The manifest's root, after the identifier and the FlatBuffers verifier.
const fb::Manifest* verified_root(const std::vector<uint8_t>& bytes, const std::string& path) {
  if (bytes.size() < 8 || !fb::ManifestBufferHasIdentifier(bytes.data()))
    bad(path, "not a checkpoint manifest (no SGCK identifier)");
  flatbuffers::Verifier::Options vo;
  vo.max_depth = 16;
  vo.max_tables = 1u << 24;
  flatbuffers::Verifier v(bytes.data(), bytes.size(), vo);
  if (!fb::VerifyManifestBuffer(v))
    bad(path, "the FlatBuffers verifier refused the manifest (torn or corrupted)");
  return fb::GetManifest(bytes.data());
}

// One tensor: a unique name, its shape and size agreeing, chunks that
// cover it exactly, a layout that makes sense.
Tensor read_tensor(const fb::Tensor* t, const Manifest& m, std::set<std::string>& names,
                   const std::string& path) {
  Tensor x;
  x.name = t->name()->str();
  if (x.name.empty() || x.name.size() > 4096 || !names.insert(x.name).second)
    bad(path, "tensor name '" + x.name.substr(0, 64) + "' is empty, too long or repeated");
  x.dtype = static_cast<hal_dtype_t>(t->dtype());
  if (t->shape()) {
    // This FlatBuffers' verifier checks a vector's 4-byte length, not
    // the 8-byte alignment of its elements: check it here (an empty
    // vector, a scalar's shape, has no elements to align).
    if (t->shape()->size() > 0 && reinterpret_cast<uintptr_t>(t->shape()->data()) % alignof(int64_t) != 0)
      bad(path, "tensor " + x.name + ": misaligned shape vector");
    x.shape.assign(t->shape()->begin(), t->shape()->end());
  }
  if (x.shape.size() > 64)
    bad(path, "tensor " + x.name + ": " + std::to_string(x.shape.size()) + " dimensions");
  x.bytes = tensor_bytes(x.dtype, x.shape, "checkpoint: " + path + ": tensor " + x.name, Code::data_loss);
  if (t->bytes() != x.bytes)
    bad(path, "tensor " + x.name + ": " + std::to_string(t->bytes()) + " bytes recorded, its shape makes " +
                  std::to_string(x.bytes));
  uint64_t next = 0;
  if (t->chunks()) {
    for (const fb::Chunk* c : *t->chunks()) {
      x.chunks.push_back(read_chunk(*c, x, m, next, path));
      next += x.chunks.back().raw_size;
    }
  }
  if (next != x.bytes)
    bad(path, "tensor " + x.name + ": chunks cover " + std::to_string(next) + " of " +
                  std::to_string(x.bytes) + " bytes");
  x.layout = static_cast<Layout>(t->layout());
  x.split_dim = t->split_dim();
  x.split_offset = t->split_offset();
  if (x.layout != Layout::local && t->global_shape()) {
    if (t->global_shape()->size() > 0 &&
        reinterpret_cast<uintptr_t>(t->global_shape()->data()) % alignof(int64_t) != 0)
      bad(path, "tensor " + x.name + ": misaligned global shape vector");
    if (t->global_shape()->size() > 64)
      bad(path, "tensor " + x.name + ": global shape has too many dimensions");
    x.global_shape.assign(t->global_shape()->begin(), t->global_shape()->end());
  }
  check_layout(x.layout, x.split_dim, x.split_offset, x.shape, x.global_shape, x.dtype,
               "checkpoint: " + path + ": tensor " + x.name, Code::data_loss);
  return x;
}

Metadata read_meta(const fb::Meta& meta) {
  Metadata out;
  out.step = meta.step();
  out.data_position = meta.data_position();
  if (meta.rng_state()) out.rng_state.assign(meta.rng_state()->begin(), meta.rng_state()->end());
  out.loss_scale = meta.loss_scale();
  if (meta.guardrails_state()) out.guardrails_state = meta.guardrails_state()->str();
  if (meta.parallel_plan()) out.parallel_plan = meta.parallel_plan()->str();
  if (meta.extra())
    for (const fb::Entry* e : *meta.extra()) out.extra[e->key()->str()] = e->value() ? e->value()->str() : "";
  return out;
}

// Every stored byte belongs to one chunk: thousands of tensors aliasing
// one stored range would each pass their hash check and multiply what a
// restore allocates for the same bytes on disk.
void check_no_overlap(const Manifest& m, const std::string& path) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [data_offset, end)
  for (const Tensor& t : m.tensors)
    for (const Chunk& c : t.chunks)
      if (c.stored_size > 0) ranges.emplace_back(c.data_offset, c.data_offset + c.stored_size);
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k)
    if (ranges[k].first < ranges[k - 1].second)
      bad(path, "stored bytes [" + std::to_string(ranges[k].first) + ", " + std::to_string(ranges[k].second) +
                    ") overlap another chunk's [" + std::to_string(ranges[k - 1].first) + ", " +
                    std::to_string(ranges[k - 1].second) + ")");
}

}  // namespace

Manifest decode(const std::vector<uint8_t>& bytes, const std::string& path) {
  const fb::Manifest* r = verified_root(bytes, path);
  Manifest m;
  m.format_version = r->format_version();
  check_version(m.format_version, path);
  m.job = r->job() ? r->job()->str() : "";
  m.step = r->step();
  m.rank = r->rank();
  m.world = r->world();
  if (m.world == 0 || m.rank >= m.world)
    bad(path, "rank " + std::to_string(m.rank) + " of world " + std::to_string(m.world));
  m.base_step = r->base_step();
  if (m.base_step < -1 || (m.base_step >= 0 && static_cast<uint64_t>(m.base_step) >= m.step))
    bad(path, "base step " + std::to_string(m.base_step) + " is not before step " + std::to_string(m.step));
  m.created_unix_ns = r->created_unix_ns();
  m.data_file = r->data_file() ? r->data_file()->str() : "";
  if (m.data_file != kData) bad(path, "data file '" + m.data_file + "' is not '" + kData + "'");
  m.data_bytes = r->data_bytes();
  std::set<std::string> names;
  if (r->tensors())
    for (const fb::Tensor* t : *r->tensors()) m.tensors.push_back(read_tensor(t, m, names, path));
  if (const fb::Meta* meta = r->meta()) m.meta = read_meta(*meta);
  if (const fb::Compression* c = r->compression()) {
    if (c->mode() > static_cast<uint8_t>(Compression::never))
      bad(path, "unknown compression mode " + std::to_string(c->mode()));
    m.compression = {static_cast<Compression>(c->mode()), c->disk_read(), c->disk_write(), c->threads()};
  }
  check_no_overlap(m, path);
  return m;
}

namespace {

// Where a step manifest's self_xxh3 lies in `bytes` (a verified buffer), or
// SIZE_MAX when the manifest has none (written before it existed).
size_t self_checksum_offset(const std::vector<uint8_t>& bytes) {
  const auto* r = flatbuffers::GetRoot<fb::StepManifest>(bytes.data());
  // The generated table hides its base; its bytes are a flatbuffers::Table.
  const uint8_t* at =
      reinterpret_cast<const flatbuffers::Table*>(r)->GetAddressOf(fb::StepManifest::VT_SELF_XXH3);
  return at == nullptr ? SIZE_MAX : static_cast<size_t>(at - bytes.data());
}

// A manifest's own checksum, when it has one, must match its bytes.
void check_self_checksum(const std::vector<uint8_t>& bytes, const std::string& path) {
  const size_t at = self_checksum_offset(bytes);
  if (at == SIZE_MAX) return;
  if (at + sizeof(uint64_t) > bytes.size()) bad(path, "its own checksum lies past its end (damaged)");
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + at, sizeof stored);
  std::vector<uint8_t> zeroed = bytes;
  std::memset(zeroed.data() + at, 0, sizeof stored);
  if (kernels::checksum(zeroed.data(), zeroed.size()) != stored)
    bad(path, "the step manifest's own checksum does not match its bytes (damaged)");
}

}  // namespace

std::vector<uint8_t> encode_step(const StepManifest& m) {
  flatbuffers::FlatBufferBuilder b(1 << 14);
  std::vector<flatbuffers::Offset<fb::ShardRef>> shards;
  for (const auto& r : m.shards)
    shards.push_back(
        fb::CreateShardRef(b, r.rank, r.manifest_bytes, r.manifest_xxh3, r.data_bytes, r.base_step));
  std::vector<flatbuffers::Offset<fb::GlobalTensor>> tensors;
  for (const auto& t : m.tensors) {
    std::vector<flatbuffers::Offset<fb::Piece>> pieces;
    for (const auto& p : t.pieces) pieces.push_back(fb::CreatePiece(b, p.rank, p.offset, p.length));
    tensors.push_back(fb::CreateGlobalTensor(b, b.CreateString(t.name), static_cast<uint8_t>(t.dtype),
                                             static_cast<fb::Layout>(t.layout), t.split_dim,
                                             b.CreateVector(t.global_shape), b.CreateVector(pieces)));
  }
  b.ForceDefaults(true);  // self_xxh3 is written while still 0
  const auto root =
      fb::CreateStepManifest(b, m.format_version, b.CreateString(m.job), m.step, m.world, m.created_unix_ns,
                             b.CreateVector(shards), b.CreateVector(tensors), 0);
  b.Finish(root, "SGCS");
  std::vector<uint8_t> out(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  const size_t at = self_checksum_offset(out);
  const uint64_t h = kernels::checksum(out.data(), out.size());
  std::memcpy(out.data() + at, &h, sizeof h);  // little-endian, as FlatBuffers stores it
  return out;
}

void check_step(const StepManifest& m, const std::string& path) {
  check_version(m.format_version, path);
  if (m.world == 0 || m.world > (1u << 20)) bad(path, "world size " + std::to_string(m.world));
  if (m.shards.size() != m.world)
    bad(path, std::to_string(m.shards.size()) + " shards for a world of " + std::to_string(m.world));
  for (uint32_t r = 0; r < m.world; ++r) {
    const ShardRef& s = m.shards[r];
    if (s.rank != r) bad(path, "shard " + std::to_string(r) + " names rank " + std::to_string(s.rank));
    if (s.manifest_bytes == 0 || s.manifest_bytes > kMaxManifestBytes)
      bad(path, "rank " + std::to_string(r) + ": manifest size " + std::to_string(s.manifest_bytes) +
                    " out of bounds");
    if (s.base_step < -1 || (s.base_step >= 0 && static_cast<uint64_t>(s.base_step) >= m.step))
      bad(path, "rank " + std::to_string(r) + ": base step " + std::to_string(s.base_step) +
                    " is not before the step");
  }
  std::set<std::string> names;
  for (const auto& t : m.tensors) {
    const std::string what = "tensor " + t.name.substr(0, 64);
    if (t.name.empty() || t.name.size() > 4096 || !names.insert(t.name).second)
      bad(path, what + ": name empty, too long or repeated");
    if (hal::dtype_size(t.dtype) == 0) bad(path, what + ": unknown dtype " + std::to_string(t.dtype));
    if (t.pieces.empty() || t.pieces.size() > m.world)
      bad(path, what + ": " + std::to_string(t.pieces.size()) + " pieces");
    std::set<uint32_t> ranks;
    for (const auto& p : t.pieces)
      if (p.rank >= m.world || !ranks.insert(p.rank).second)
        bad(path, what + ": piece of rank " + std::to_string(p.rank) + " unknown or repeated");
    if (t.layout == Layout::local) continue;
    if (t.layout != Layout::replicated && t.layout != Layout::split)
      bad(path, what + ": unknown layout " + std::to_string(static_cast<int>(t.layout)));
    if (t.global_shape.size() > 64) bad(path, what + ": too many dimensions");
    tensor_bytes(t.dtype, t.global_shape, "checkpoint: " + path + ": " + what, Code::data_loss);
    if (t.layout == Layout::replicated) continue;
    if (t.split_dim < 0 || static_cast<size_t>(t.split_dim) >= t.global_shape.size())
      bad(path, what + ": split dimension " + std::to_string(t.split_dim) + " out of range");
    int64_t next = 0;
    const Piece* last = nullptr;
    for (const auto& p : t.pieces) {
      // A replica: the same slice as the piece before, held by another rank
      // (experts replicated over their expert-data group).
      if (last != nullptr && p.offset == last->offset && p.length == last->length) continue;
      last = &p;
      if (p.offset != next || p.length < 0 ||
          p.length > t.global_shape[static_cast<size_t>(t.split_dim)] - next)
        bad(path, what + ": the slice of rank " + std::to_string(p.rank) + " [" + std::to_string(p.offset) +
                      ", +" + std::to_string(p.length) + ") does not continue at " + std::to_string(next));
      next += p.length;
    }
    if (next != t.global_shape[static_cast<size_t>(t.split_dim)])
      bad(path, what + ": the slices cover " + std::to_string(next) + " of " +
                    std::to_string(t.global_shape[static_cast<size_t>(t.split_dim)]));
  }
}

StepManifest decode_step(const std::vector<uint8_t>& bytes, const std::string& path) {
  if (bytes.size() < 8 || !flatbuffers::BufferHasIdentifier(bytes.data(), "SGCS"))
    bad(path, "not a step manifest (no SGCS identifier)");
  flatbuffers::Verifier::Options vo;
  vo.max_depth = 16;
  vo.max_tables = 1u << 22;
  flatbuffers::Verifier v(bytes.data(), bytes.size(), vo);
  if (!v.VerifyBuffer<fb::StepManifest>("SGCS"))
    bad(path, "the FlatBuffers verifier refused the step manifest (torn or corrupted)");
  check_self_checksum(bytes, path);
  const auto* r = flatbuffers::GetRoot<fb::StepManifest>(bytes.data());
  StepManifest m;
  m.format_version = r->format_version();
  m.job = r->job() ? r->job()->str() : "";
  m.step = r->step();
  m.world = r->world();
  m.created_unix_ns = r->created_unix_ns();
  if (r->shards())
    for (const fb::ShardRef* s : *r->shards()) {
      if (m.shards.size() > (1u << 20)) bad(path, "too many shards");
      m.shards.push_back(
          {s->rank(), s->manifest_bytes(), s->manifest_xxh3(), s->data_bytes(), s->base_step()});
    }
  if (r->tensors())
    for (const fb::GlobalTensor* t : *r->tensors()) {
      GlobalTensor x;
      x.name = t->name()->str();
      x.dtype = static_cast<hal_dtype_t>(t->dtype());
      x.layout = static_cast<Layout>(t->layout());
      x.split_dim = t->split_dim();
      if (t->global_shape()) {
        if (t->global_shape()->size() > 0 &&
            reinterpret_cast<uintptr_t>(t->global_shape()->data()) % alignof(int64_t) != 0)
          bad(path, "tensor " + x.name.substr(0, 64) + ": misaligned global shape vector");
        if (t->global_shape()->size() > 64)
          bad(path, "tensor " + x.name.substr(0, 64) + ": too many dimensions");
        x.global_shape.assign(t->global_shape()->begin(), t->global_shape()->end());
      }
      if (t->pieces())
        for (const fb::Piece* p : *t->pieces()) {
          if (x.pieces.size() > m.world)
            bad(path, "tensor " + x.name.substr(0, 64) + ": more pieces than ranks");
          x.pieces.push_back({p->rank(), p->offset(), p->length()});
        }
      m.tensors.push_back(std::move(x));
    }
  check_step(m, path);
  return m;
}

std::string job_dir(const Options& o) { return o.dir + "/" + o.job; }

std::string step_dir(const std::string& job_dir, uint64_t step) {
  char b[40];
  std::snprintf(b, sizeof b, "step-%020" PRIu64, step);
  return job_dir + "/" + b;
}

std::string shard_dir(const std::string& job_dir, uint64_t step, uint32_t rank) {
  char b[24];
  std::snprintf(b, sizeof b, "rank-%05u", rank);
  return step_dir(job_dir, step) + "/" + b;
}

bool parse_step(const std::string& name, uint64_t& step) {
  if (name.size() != 25 || name.rfind("step-", 0) != 0) return false;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return false;
  step = std::stoull(name.substr(5));
  return true;
}

bool parse_rank(const std::string& name, uint32_t& rank) {
  if (name.size() != 10 || name.rfind("rank-", 0) != 0) return false;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return false;
  rank = static_cast<uint32_t>(std::stoul(name.substr(5)));
  return true;
}

}  // namespace sigma::checkpoint::format
