#include "format.hpp"

#include "checkpoint_generated.h"

#include <zstd.h>

#include <cinttypes>
#include <cstdio>
#include <set>

namespace sigma::checkpoint::format {
namespace {

namespace fb = sigma::ckpt::fb;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(Code::data_loss, "checkpoint: " + path + ": " + what);
}

}  // namespace

uint64_t tensor_bytes(hal_dtype_t dtype, const std::vector<int64_t>& shape, const std::string& what, Code code) {
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

std::vector<uint8_t> encode(const Manifest& m) {
  flatbuffers::FlatBufferBuilder b(1 << 16);
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const auto& t : m.tensors) {
    std::vector<flatbuffers::Offset<fb::Chunk>> chunks;
    for (const auto& c : t.chunks)
      chunks.push_back(fb::CreateChunk(b, c.offset, c.raw_size, static_cast<fb::Codec>(c.codec), c.data_offset,
                                       c.stored_size, c.raw_xxh3, c.stored_xxh3));
    tensors.push_back(fb::CreateTensor(b, b.CreateString(t.name), static_cast<uint8_t>(t.dtype),
                                       b.CreateVector(t.shape), t.bytes, b.CreateVector(chunks)));
  }
  std::vector<flatbuffers::Offset<fb::Entry>> extra;
  for (const auto& [k, v] : m.meta.extra) extra.push_back(fb::CreateEntry(b, b.CreateString(k), b.CreateString(v)));
  const auto meta = fb::CreateMeta(b, m.meta.step, m.meta.data_position, b.CreateVector(m.meta.rng_state),
                                   m.meta.loss_scale, b.CreateString(m.meta.guardrails_state),
                                   b.CreateString(m.meta.parallel_plan), b.CreateVector(extra));
  const auto root = fb::CreateManifest(b, m.format_version, b.CreateString(m.job), m.step, m.rank, m.world,
                                       m.base_step, m.created_unix_ns, b.CreateString(m.data_file), m.data_bytes,
                                       b.CreateVector(tensors), meta);
  fb::FinishManifestBuffer(b, root);
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

Manifest decode(const std::vector<uint8_t>& bytes, const std::string& path) {
  if (bytes.size() < 8 || !fb::ManifestBufferHasIdentifier(bytes.data()))
    bad(path, "not a checkpoint manifest (no SGCK identifier)");
  flatbuffers::Verifier::Options vo;
  vo.max_depth = 16;
  vo.max_tables = 1u << 24;
  flatbuffers::Verifier v(bytes.data(), bytes.size(), vo);
  if (!fb::VerifyManifestBuffer(v)) bad(path, "the FlatBuffers verifier refused the manifest (torn or corrupted)");
  const fb::Manifest* r = fb::GetManifest(bytes.data());
  Manifest m;
  m.format_version = r->format_version();
  if (m.format_version != kVersion)
    bad(path, "format version " + std::to_string(m.format_version) + ", this library reads " + std::to_string(kVersion));
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
  if (r->tensors()) {
    for (const fb::Tensor* t : *r->tensors()) {
      Tensor x;
      x.name = t->name()->str();
      if (x.name.empty() || x.name.size() > 4096 || !names.insert(x.name).second)
        bad(path, "tensor name '" + x.name.substr(0, 64) + "' is empty, too long or repeated");
      x.dtype = static_cast<hal_dtype_t>(t->dtype());
      if (t->shape()) {
        // This FlatBuffers' verifier checks a vector's 4-byte length, not
        // the 8-byte alignment of its elements: check it here.
        if (reinterpret_cast<uintptr_t>(t->shape()->data()) % alignof(int64_t) != 0)
          bad(path, "tensor " + x.name + ": misaligned shape vector");
        x.shape.assign(t->shape()->begin(), t->shape()->end());
      }
      if (x.shape.size() > 64) bad(path, "tensor " + x.name + ": " + std::to_string(x.shape.size()) + " dimensions");
      x.bytes = tensor_bytes(x.dtype, x.shape, "checkpoint: " + path + ": tensor " + x.name, Code::data_loss);
      if (t->bytes() != x.bytes)
        bad(path, "tensor " + x.name + ": " + std::to_string(t->bytes()) + " bytes recorded, its shape makes " +
                      std::to_string(x.bytes));
      uint64_t next = 0;
      if (t->chunks()) {
        for (const fb::Chunk* c : *t->chunks()) {
          Chunk k{c->offset(), c->raw_size(), static_cast<uint8_t>(c->codec()), c->data_offset(), c->stored_size(),
                  c->raw_xxh3(), c->stored_xxh3()};
          const std::string where = "tensor " + x.name + " chunk " + std::to_string(x.chunks.size());
          if (k.offset != next) bad(path, where + ": starts at " + std::to_string(k.offset) + ", expected " + std::to_string(next));
          if (k.raw_size == 0 || k.raw_size > kMaxChunkBytes || k.raw_size > x.bytes - k.offset)
            bad(path, where + ": raw size " + std::to_string(k.raw_size) + " out of bounds");
          if (k.raw_size % hal::dtype_size(x.dtype) != 0) bad(path, where + ": not a whole number of elements");
          if (k.codec > kSameAsBase) bad(path, where + ": unknown codec " + std::to_string(k.codec));
          if ((k.codec == kSameAsBase) != (k.stored_size == 0)) bad(path, where + ": stored size does not fit its codec");
          if (k.codec != kSameAsBase && m.base_step < 0 && k.codec != kShuffleZstd)
            bad(path, where + ": a delta chunk in a base checkpoint");
          if (k.codec == kSameAsBase && m.base_step < 0) bad(path, where + ": refers to a base that a base lacks");
          if (k.stored_size > ZSTD_compressBound(k.raw_size) || k.data_offset > m.data_bytes ||
              k.stored_size > m.data_bytes - k.data_offset)
            bad(path, where + ": stored bytes [" + std::to_string(k.data_offset) + ", +" + std::to_string(k.stored_size) +
                          ") out of the data file's " + std::to_string(m.data_bytes));
          next += k.raw_size;
          x.chunks.push_back(k);
        }
      }
      if (next != x.bytes) bad(path, "tensor " + x.name + ": chunks cover " + std::to_string(next) + " of " + std::to_string(x.bytes) + " bytes");
      m.tensors.push_back(std::move(x));
    }
  }
  if (const fb::Meta* meta = r->meta()) {
    m.meta.step = meta->step();
    m.meta.data_position = meta->data_position();
    if (meta->rng_state()) m.meta.rng_state.assign(meta->rng_state()->begin(), meta->rng_state()->end());
    m.meta.loss_scale = meta->loss_scale();
    if (meta->guardrails_state()) m.meta.guardrails_state = meta->guardrails_state()->str();
    if (meta->parallel_plan()) m.meta.parallel_plan = meta->parallel_plan()->str();
    if (meta->extra())
      for (const fb::Entry* e : *meta->extra()) m.meta.extra[e->key()->str()] = e->value() ? e->value()->str() : "";
  }
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
