#include "shard.hpp"

#include "codec.hpp"
#include "disk_rates.hpp"
#include "io.hpp"

#include <sigma/kernels.hpp>

#include <sys/mman.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

#include <algorithm>
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

void offer_huge_pages(void* p, uint64_t n) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + kHuge - 1) & ~(kHuge - 1), hi = (a + n) & ~(kHuge - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
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

// How this save chooses codecs. The automatic mode needs the device's
// rates; a probe that cannot run (a full disk) leaves them unknown, and
// unknown rates store raw (nothing to gain from the codec is known).
codec::Plan plan_of(const Options& o, std::string* note) {
  codec::Plan p;
  p.mode = o.compression;
  p.level = o.zstd_level;
  p.threads = static_cast<unsigned>(std::max(1, tbb::this_task_arena::max_concurrency()));
  if (p.mode != Compression::automatic) return p;
  try {
    p.disk = disk::rates(o.dir, o.disk_read_bytes_per_s, o.disk_write_bytes_per_s);
  } catch (const Error& e) {
    *note = std::string(e.what()) + "; the device's rates are unknown, chunks are stored raw";
  }
  return p;
}

// One chunk of one tensor, in file order.
struct ChunkJob {
  size_t tensor;
  uint64_t offset, bytes;
  const uint8_t* base;
  uint64_t base_xxh3;
  double base_ratio;
  uint8_t* copy;  // where the chunk's raw bytes also go (the next base), or NULL
};

// The manifest's tensor records (no chunks yet) and every chunk to encode.
std::vector<ChunkJob> chunk_jobs(const Options& o, const std::vector<HostTensor>& tensors, const Base* base,
                                 const std::vector<uint8_t*>* copy_to, format::Manifest& m) {
  const uint64_t cb = chunk_size(o);
  std::vector<ChunkJob> jobs;
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
    for (uint64_t off = 0, k = 0; off < t.bytes; off += cb, ++k) {
      const uint64_t n = std::min(cb, t.bytes - off);
      const double ratio =
          bt && k < bt->stored.size() ? static_cast<double>(bt->stored[k]) / static_cast<double>(n) : 1.0;
      jobs.push_back({i, off, n, bt ? bt->bytes.data() + off : nullptr, bt ? bt->hashes[k] : 0, ratio,
                      copy ? copy + off : nullptr});
    }
  }
  return jobs;
}

// Encodes the chunks in batches on oneTBB while the previous batch's stored
// bytes go to `data` on another thread: compression and I/O overlap, and
// memory stays bounded by two batches of frames. Small batches start the
// disk early (it is the bound: the writer streams to it as it goes, see
// io::Writer). A raw chunk is written from the tensor itself, at a 4 KiB
// boundary of the file. Appends each chunk's record to its tensor in `m`.
void write_chunks(const std::vector<HostTensor>& tensors, const std::vector<ChunkJob>& jobs,
                  const codec::Plan& plan, io::Writer& data, format::Manifest& m) {
  struct Out {
    const uint8_t* p;
    uint64_t n, at;
  };
  const size_t batch = 16;
  std::vector<std::vector<uint8_t>> frames(batch), writing(batch);
  std::vector<format::Chunk> recs(batch);
  std::vector<Out> outs, written;
  std::future<void> pending;
  uint64_t offset = 0;
  for (size_t first = 0; first < jobs.size(); first += batch) {
    const size_t n = std::min(batch, jobs.size() - first);
    tbb::parallel_for(size_t{0}, n, [&](size_t j) {
      const ChunkJob& jb = jobs[first + j];
      const HostTensor& t = tensors[jb.tensor];
      const auto es = static_cast<uint32_t>(hal::dtype_size(t.dtype));
      recs[j] = codec::encode(t.data + jb.offset, jb.bytes, es, jb.base, jb.base_xxh3, jb.base_ratio, plan,
                              frames[j]);
      if (jb.copy) std::memcpy(jb.copy, t.data + jb.offset, jb.bytes);  // while the chunk is in cache
    });
    outs.clear();
    for (size_t j = 0; j < n; ++j) {
      const ChunkJob& jb = jobs[first + j];
      format::Chunk c = recs[j];
      c.offset = jb.offset;
      if (c.codec == format::kRaw)
        offset = (offset + format::kRawAlign - 1) / format::kRawAlign * format::kRawAlign;
      c.data_offset = offset;
      offset += c.stored_size;
      m.tensors[jb.tensor].chunks.push_back(c);
      const uint8_t* p = c.codec == format::kRaw ? tensors[jb.tensor].data + jb.offset : frames[j].data();
      outs.push_back({p, c.stored_size, c.data_offset});
    }
    if (pending.valid()) pending.get();  // the previous batch is written (or throws)
    frames.swap(writing);
    written.swap(outs);
    pending = std::async(std::launch::async, [&data, &written, first] {
      for (size_t j = 0; j < written.size(); ++j) {
        data.pad_to(written[j].at);
        data.write(written[j].p, written[j].n);
        if (first + j == 0 && crash_armed("data")) {
          data.flush_aligned();  // the first chunk's bytes are in the file, the rest are not
          crash_point("data");
        }
      }
    });
  }
  if (pending.valid()) pending.get();
}

SaveResult result_of(const format::Manifest& m, uint64_t step, const std::string& path, const Base* base) {
  SaveResult r;
  r.step = step;
  r.path = path;
  r.base = base == nullptr;
  for (const auto& t : m.tensors) {
    r.raw_bytes += t.bytes;
    for (const auto& c : t.chunks) r.chunks_unchanged += c.codec == format::kSameAsBase;
    r.chunks += t.chunks.size();
  }
  r.stored_bytes = m.data_bytes;
  return r;
}

}  // namespace

SaveResult write(const Options& o, uint64_t step, const std::vector<HostTensor>& tensors,
                 const Metadata& meta, const Base* base, std::vector<std::vector<format::Chunk>>* records,
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
    format::Manifest m;
    m.job = o.job;
    m.step = step;
    m.rank = o.rank;
    m.world = o.world;
    m.base_step = base ? static_cast<int64_t>(base->step) : -1;
    m.created_unix_ns = now_unix_ns();
    m.meta = meta;
    m.meta.step = step;
    std::string note;
    const codec::Plan plan = plan_of(o, &note);
    m.compression = {plan.mode, plan.disk.read, plan.disk.write, plan.threads};
    const std::vector<ChunkJob> jobs = chunk_jobs(o, tensors, base, copy_to, m);
    io::Writer data(tmp + "/" + format::kData, o.direct_io);
    write_chunks(tensors, jobs, plan, data, m);
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
    if (records) {
      records->clear();
      for (const auto& t : m.tensors) records->push_back(t.chunks);
    }
    SaveResult r = result_of(m, step, final_path, base);
    r.note = note;
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

// A differential chunk reads its base's same chunk.
bool needs_base(const format::Chunk& c) {
  return c.codec == format::kXorShuffleZstd || c.codec == format::kSameAsBase;
}

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
      if (needs_base(c) && base != nullptr && !base_data)
        base_data = std::make_unique<io::Reader>(base->path + "/" + format::kData);
  }
  std::string where(size_t k) const { return dpath + ": tensor " + t.name + " chunk " + std::to_string(k); }
  // Chunk k's base chunk when it needs one (checked to match), else NULL.
  const format::Chunk* base_chunk(size_t k) const {
    const format::Chunk& c = t.chunks[k];
    if (!needs_base(c)) return nullptr;
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
// those of the base chunk `b` it needs (when not NULL) checked. Raw bytes --
// a raw chunk, or the raw base chunk of an unchanged one -- are read
// straight into `out` and checked there: no copy, one pass over them.
void decode_chunk(const format::Tensor& t, size_t k, const format::Chunk& c, const std::string& where,
                  const io::Reader& data, const format::Chunk* b, const io::Reader* base_data, uint8_t* out) {
  const auto es = static_cast<uint32_t>(hal::dtype_size(t.dtype));
  if (c.codec == format::kRaw)
    return codec::check_raw_hash(c, data.read_direct(c.data_offset, out, c.raw_size), where);
  thread_local std::vector<uint8_t> stored, bstored, base_raw;
  const uint8_t* br = nullptr;
  if (b != nullptr) {
    // The base's same chunk, decoded (and verified) first.
    const std::string bwhere = base_data->path() + ": tensor " + t.name + " chunk " + std::to_string(k);
    uint8_t* into = out;  // an unchanged chunk is its base chunk
    if (c.codec != format::kSameAsBase) {
      base_raw.resize(c.raw_size);
      into = base_raw.data();
    }
    if (b->codec == format::kRaw) {
      codec::check_raw_hash(*b, base_data->read_direct(b->data_offset, into, b->raw_size), bwhere);
    } else {
      bstored.resize(b->stored_size);
      base_data->read_at(b->data_offset, bstored.data(), b->stored_size);
      codec::decode(*b, bstored.data(), es, nullptr, into, bwhere);
    }
    if (c.codec == format::kSameAsBase) {
      // Its bytes were just checked to hash to the base's record.
      if (b->raw_xxh3 != c.raw_xxh3)
        throw Error(Code::data_loss,
                    "checkpoint: " + where + ": the base's chunk does not have the recorded xxh3");
      return;
    }
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
        // Raw bytes are checked where they land, as they are read into
        // place: reading them here too would read them twice.
        if (b != nullptr && b->codec != format::kRaw)
          check(*base_data, *b, base_data->path() + ": tensor " + t.name + " chunk " + std::to_string(k));
        if (c.codec != format::kSameAsBase && c.codec != format::kRaw) check(data, c, where);
      });
}

void check_padding(const Shard& s) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [data_offset, end), checked not to overlap
  for (const auto& t : s.manifest.tensors)
    for (const auto& c : t.chunks)
      if (c.stored_size > 0) ranges.emplace_back(c.data_offset, c.data_offset + c.stored_size);
  std::sort(ranges.begin(), ranges.end());
  ranges.emplace_back(s.manifest.data_bytes, s.manifest.data_bytes);
  const io::Reader data(s.path + "/" + format::kData);
  std::vector<uint8_t> gap;
  uint64_t at = 0;
  for (const auto& [start, end] : ranges) {
    // In pieces: a hostile manifest's gaps can be as large as the file.
    for (uint64_t p = at; p < start; p += gap.size()) {
      gap.resize(std::min<uint64_t>(start - p, uint64_t{1} << 20));
      data.read_at(p, gap.data(), gap.size());
      for (size_t i = 0; i < gap.size(); ++i)
        if (gap[i] != 0)
          throw Error(Code::data_loss,
                      "checkpoint: " + data.path() + ": byte " + std::to_string(p + i) +
                          " lies between chunks and is not the writer's zero padding (damaged)");
    }
    at = std::max(at, end);
  }
}

}  // namespace sigma::checkpoint::shard
