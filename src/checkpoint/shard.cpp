#include "shard.hpp"

#include "codec.hpp"
#include "io.hpp"

#include <sigma/kernels.hpp>

#include <sys/mman.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>

namespace sigma::checkpoint::shard {

Bytes::Bytes(uint64_t n) : n_(n) {
  constexpr uint64_t kHuge = uint64_t{2} << 20;
  const uint64_t size = (std::max<uint64_t>(n, 1) + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, size);
  if (p == nullptr)
    throw Error(Code::out_of_memory,
                "checkpoint: cannot allocate " + std::to_string(n) + " bytes of staging memory");
  ::madvise(p, size, MADV_HUGEPAGE);
  p_.reset(static_cast<uint8_t*>(p));
}

namespace {

uint64_t now_unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Test hook for the crash tests: SIGMA_CHECKPOINT_CRASH_AT=data|manifest|
// rename kills this process with SIGKILL at that point of a save (half the
// data written / data durable but no manifest / manifest durable but not
// renamed into place). Read once; unset in production.
bool crash_armed(const char* where) {
  static const std::string at = [] {
    const char* v = std::getenv("SIGMA_CHECKPOINT_CRASH_AT");
    return std::string(v ? v : "");
  }();
  return !at.empty() && at == where;
}

void crash_point(const char* where) {
  if (crash_armed(where)) ::raise(SIGKILL);
}

// Chunks of one tensor start at multiples of chunk_bytes rounded down to
// whole elements of at most 8 bytes.
uint64_t chunk_size(const Options& o) { return std::max<uint64_t>(8, o.chunk_bytes / 8 * 8); }

}  // namespace

SaveResult write(const Options& o, uint64_t step, const std::vector<HostTensor>& tensors,
                 const Metadata& meta, const Base* base, std::vector<std::vector<uint64_t>>* hashes,
                 const std::vector<uint8_t*>* copy_to) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string job = format::job_dir(o);
  const std::string final_path = format::shard_dir(job, step, o.rank);
  if (io::exists(final_path))
    throw Error(Code::invalid_argument, "checkpoint: step " + std::to_string(step) + " of rank " +
                                            std::to_string(o.rank) + " exists already at " + final_path);
  const std::string tmp = job + "/.tmp-step-" + std::to_string(step) + "-rank-" + std::to_string(o.rank) +
                          "-" + std::to_string(::getpid());
  io::remove_tree(tmp);
  io::make_dirs(tmp);
  try {
    const uint64_t cb = chunk_size(o);
    format::Manifest m;
    m.job = o.job;
    m.step = step;
    m.rank = o.rank;
    m.world = o.world;
    m.base_step = base ? static_cast<int64_t>(base->step) : -1;
    m.created_unix_ns = now_unix_ns();
    m.meta = meta;
    m.meta.step = step;
    // Every chunk of every tensor, in file order.
    struct Job {
      size_t tensor;
      uint64_t offset, bytes;
      const uint8_t* base;
      uint64_t base_xxh3;
      uint8_t* copy;  // where the chunk's raw bytes also go (the next base), or NULL
    };
    std::vector<Job> jobs;
    if (hashes) hashes->assign(tensors.size(), {});
    for (size_t i = 0; i < tensors.size(); ++i) {
      const HostTensor& t = tensors[i];
      format::Tensor rec;
      static_cast<TensorSpec&>(rec) = t;
      rec.bytes = t.bytes;
      m.tensors.push_back(rec);
      const Base::Tensor* bt = nullptr;
      if (base && base->chunk_bytes == cb) {
        auto it = base->tensors.find(t.name);
        if (it != base->tensors.end() && it->second.dtype == t.dtype && it->second.bytes.size() == t.bytes)
          bt = &it->second;
      }
      uint8_t* copy = copy_to != nullptr ? (*copy_to)[i] : nullptr;
      for (uint64_t off = 0, k = 0; off < t.bytes; off += cb, ++k)
        jobs.push_back({i, off, std::min(cb, t.bytes - off), bt ? bt->bytes.data() + off : nullptr,
                        bt ? bt->hashes[k] : 0, copy ? copy + off : nullptr});
    }
    io::Writer data(tmp + "/" + format::kData, o.direct_io);
    // Encode a batch of chunks in parallel while the previous batch's frames
    // go to disk: compression and I/O overlap, and memory stays bounded by
    // two batches of frames. Small batches start the disk early (it is the
    // bound: the writer streams to it as it goes, see io::Writer).
    const size_t batch = 16;
    std::vector<std::vector<uint8_t>> frames(batch), writing(batch);
    std::vector<format::Chunk> recs(batch), written_recs;
    std::future<void> pending;
    size_t pending_n = 0;
    uint64_t offset = 0;
    for (size_t first = 0; first < jobs.size(); first += batch) {
      const size_t n = std::min(batch, jobs.size() - first);
      tbb::parallel_for(size_t{0}, n, [&](size_t j) {
        const Job& jb = jobs[first + j];
        const HostTensor& t = tensors[jb.tensor];
        const auto es = static_cast<uint32_t>(hal::dtype_size(t.dtype));
        recs[j] =
            codec::encode(t.data + jb.offset, jb.bytes, es, jb.base, jb.base_xxh3, o.zstd_level, frames[j]);
        if (jb.copy) std::memcpy(jb.copy, t.data + jb.offset, jb.bytes);  // while the chunk is in cache
      });
      for (size_t j = 0; j < n; ++j) {
        format::Chunk c = recs[j];
        c.offset = jobs[first + j].offset;
        c.data_offset = offset;
        offset += c.stored_size;
        m.tensors[jobs[first + j].tensor].chunks.push_back(c);
        if (hashes) (*hashes)[jobs[first + j].tensor].push_back(c.raw_xxh3);
      }
      if (pending.valid()) pending.get();  // the previous batch is written (or throws)
      frames.swap(writing);
      pending_n = n;
      written_recs.assign(recs.begin(), recs.begin() + static_cast<std::ptrdiff_t>(n));
      pending = std::async(std::launch::async, [&data, &writing, &written_recs, pending_n, first] {
        for (size_t j = 0; j < pending_n; ++j) {
          data.write(writing[j].data(), written_recs[j].stored_size);
          if (first + j == 0 && crash_armed("data")) {
            data.flush_aligned();  // the first frame's bytes are in the file, the rest are not
            crash_point("data");
          }
        }
      });
    }
    if (pending.valid()) pending.get();
    m.data_bytes = data.size();
    data.sync_and_close();
    crash_point("manifest");
    const auto manifest = format::encode(m);
    io::write_file(tmp + "/" + format::kManifest, manifest.data(), manifest.size());
    io::sync_dir(tmp);
    crash_point("rename");
    const std::string step_path = format::step_dir(job, step);
    io::make_dirs(step_path);
    io::rename(tmp, final_path);
    io::sync_dir(step_path);
    io::sync_dir(job);
    SaveResult r;
    r.step = step;
    r.path = final_path;
    r.base = base == nullptr;
    for (const auto& t : m.tensors) {
      r.raw_bytes += t.bytes;
      for (const auto& c : t.chunks) r.chunks_unchanged += c.codec == format::kSameAsBase;
      r.chunks += t.chunks.size();
    }
    r.stored_bytes = m.data_bytes;
    r.persist_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  } catch (...) {
    io::remove_tree(tmp);
    throw;
  }
}

Shard open(const std::string& path) {
  return open(path, io::read_file(path + "/" + format::kManifest, format::kMaxManifestBytes));
}

Shard open(const std::string& path, const std::vector<uint8_t>& manifest_bytes) {
  Shard s;
  s.path = path;
  const std::string mpath = path + "/" + format::kManifest;
  s.manifest = format::decode(manifest_bytes, mpath);
  const std::string dpath = path + "/" + format::kData;
  const uint64_t size = io::file_size(dpath);
  if (size != s.manifest.data_bytes)
    throw Error(Code::data_loss, "checkpoint: " + dpath + ": " + std::to_string(size) +
                                     " bytes, the manifest says " + std::to_string(s.manifest.data_bytes) +
                                     " (truncated or extended)");
  return s;
}

std::string base_path(const Shard& s) {
  const std::filesystem::path shard(s.path);
  return format::shard_dir(shard.parent_path().parent_path().string(),
                           static_cast<uint64_t>(s.manifest.base_step), s.manifest.rank);
}

std::unique_ptr<Shard> open_base(const Shard& s) {
  return s.manifest.base_step < 0 ? nullptr : std::make_unique<Shard>(open(base_path(s)));
}

namespace {

// What decoding one tensor's chunks needs: its data file and, for
// differential chunks, the base's same tensor and data file.
struct TensorSource {
  TensorSource(const Shard& s, const format::Tensor& t, const Shard* base)
      : t(t), dpath(s.path + "/" + format::kData), data(dpath), base(base) {
    if (base) {
      for (const auto& x : base->manifest.tensors)
        if (x.name == t.name) bt = &x;
    }
    for (const auto& c : t.chunks)
      if (c.codec != format::kShuffleZstd && base != nullptr && !base_data)
        base_data = std::make_unique<io::Reader>(base->path + "/" + format::kData);
  }
  std::string where(size_t k) const { return dpath + ": tensor " + t.name + " chunk " + std::to_string(k); }
  // Chunk k's base chunk when it needs one (checked to match), else NULL.
  const format::Chunk* base_chunk(size_t k) const {
    const format::Chunk& c = t.chunks[k];
    if (c.codec == format::kShuffleZstd) return nullptr;
    if (bt == nullptr || bt->dtype != t.dtype || bt->bytes != t.bytes || k >= bt->chunks.size() ||
        bt->chunks[k].offset != c.offset || bt->chunks[k].raw_size != c.raw_size || !base_data)
      throw Error(Code::data_loss, "checkpoint: " + where(k) + ": the base " +
                                       (base ? base->path : std::string("(none)")) +
                                       " has no matching chunk");
    return &bt->chunks[k];
  }

  const format::Tensor& t;
  const format::Tensor* bt = nullptr;
  std::string dpath;
  io::Reader data;
  const Shard* base;
  std::unique_ptr<io::Reader> base_data;
};

// Runs `fn(k, chunk, where, base_chunk, base_reader)` for every chunk of
// tensor `t` on oneTBB's threads (in order on this one when not
// `parallel`); `base_chunk` (and its reader) is the base's same chunk for a
// chunk that needs it, checked to match, else NULL.
template <typename Fn>
void for_each_chunk(const Shard& s, const format::Tensor& t, const Shard* base, Fn&& fn,
                    bool parallel = true) {
  const TensorSource src(s, t, base);
  auto one = [&](size_t k) {
    fn(k, t.chunks[k], src.where(k), src.data, src.base_chunk(k), src.base_data.get());
  };
  if (parallel) {
    // oneTBB's own synchronisation is invisible to ThreadSanitizer: each job
    // ends by passing this mutex, which this thread takes before the
    // readers close, so their last reads are ordered before the close for
    // it too (one uncontended lock per chunk of megabytes).
    std::mutex done;
    tbb::parallel_for(size_t{0}, t.chunks.size(), [&](size_t k) {
      one(k);
      std::lock_guard<std::mutex> lk(done);
    });
    std::lock_guard<std::mutex> lk(done);
  } else {
    for (size_t k = 0; k < t.chunks.size(); ++k) one(k);
  }
}

// Chunk `c` (the k-th) decoded into `out` (c.raw_size bytes), its hashes and
// those of the base chunk `b` it needs (when not NULL) checked.
void decode_chunk(const format::Tensor& t, size_t k, const format::Chunk& c, const std::string& where,
                  const io::Reader& data, const format::Chunk* b, const io::Reader* base_data, uint8_t* out) {
  const auto es = static_cast<uint32_t>(hal::dtype_size(t.dtype));
  thread_local std::vector<uint8_t> stored, bstored, base_raw;
  const uint8_t* br = nullptr;
  if (b != nullptr) {
    // The base's same chunk, decoded (and verified) first.
    base_raw.resize(c.raw_size);
    bstored.resize(b->stored_size);
    base_data->read_at(b->data_offset, bstored.data(), b->stored_size);
    codec::decode(*b, bstored.data(), es, nullptr, base_raw.data(),
                  base_data->path() + ": tensor " + t.name + " chunk " + std::to_string(k));
    br = base_raw.data();
  }
  stored.resize(c.stored_size);
  if (c.stored_size) data.read_at(c.data_offset, stored.data(), c.stored_size);
  codec::decode(c, stored.data(), es, br, out, where);
}

// Decodes every chunk of `t`, hashes checked: into `out` at its offset, or,
// without `out`, into a chunk-sized buffer of the thread that `sink` (when
// given) sees, in order.
void decode(const Shard& s, const format::Tensor& t, const Shard* base, uint8_t* out, const ChunkSink* sink) {
  for_each_chunk(
      s, t, base,
      [&](size_t k, const format::Chunk& c, const std::string& where, const io::Reader& data,
          const format::Chunk* b, const io::Reader* base_data) {
        if (out != nullptr) return decode_chunk(t, k, c, where, data, b, base_data, out + c.offset);
        thread_local std::vector<uint8_t> raw;
        raw.resize(c.raw_size);
        decode_chunk(t, k, c, where, data, b, base_data, raw.data());
        if (sink != nullptr) (*sink)(c.offset, raw.data(), c.raw_size);
      },
      out != nullptr || sink == nullptr);
}

}  // namespace

void read_tensor(const Shard& s, const format::Tensor& t, const Shard* base, uint8_t* out) {
  decode(s, t, base, out, nullptr);
}

void check_tensor(const Shard& s, const format::Tensor& t, const Shard* base) {
  decode(s, t, base, nullptr, nullptr);
}

void stream_tensor(const Shard& s, const format::Tensor& t, const Shard* base, const ChunkSink& sink) {
  decode(s, t, base, nullptr, &sink);
}

struct ChunkCursor::State {
  State(const Shard& s, const format::Tensor& t, const Shard* base) : src(s, t, base) {}
  TensorSource src;
  size_t next = 0;
  std::vector<uint8_t> raw;
};

ChunkCursor::ChunkCursor(const Shard& s, const format::Tensor& t, const Shard* base)
    : state_(std::make_unique<State>(s, t, base)) {}
ChunkCursor::~ChunkCursor() = default;

bool ChunkCursor::next(uint64_t* offset, const std::vector<uint8_t>** raw) {
  State& st = *state_;
  if (st.next >= st.src.t.chunks.size()) return false;
  const size_t k = st.next++;
  const format::Chunk& c = st.src.t.chunks[k];
  st.raw.resize(c.raw_size);
  decode_chunk(st.src.t, k, c, st.src.where(k), st.src.data, st.src.base_chunk(k), st.src.base_data.get(),
               st.raw.data());
  *offset = c.offset;
  *raw = &st.raw;
  return true;
}

void verify_stored(const Shard& s, const format::Tensor& t, const Shard* base) {
  for_each_chunk(
      s, t, base,
      [&](size_t k, const format::Chunk& c, const std::string& where, const io::Reader& data,
          const format::Chunk* b, const io::Reader* base_data) {
        thread_local std::vector<uint8_t> stored;
        auto check = [&](const io::Reader& r, const format::Chunk& x, const std::string& at) {
          stored.resize(x.stored_size);
          if (x.stored_size) r.read_at(x.data_offset, stored.data(), x.stored_size);
          if (kernels::checksum(stored.data(), x.stored_size) != x.stored_xxh3)
            throw Error(Code::data_loss, "checkpoint: " + at + ": xxh3 of the stored bytes does not match");
        };
        if (b != nullptr)
          check(*base_data, *b, base_data->path() + ": tensor " + t.name + " chunk " + std::to_string(k));
        if (c.codec != format::kSameAsBase) check(data, c, where);
      });
}

}  // namespace sigma::checkpoint::shard
