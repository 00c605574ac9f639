// The checkpoint engine: base/differential choice, the asynchronous writer
// with back-pressure, retention, and restore with fallback.
#include <sigma/checkpoint.hpp>
#include <sigma/kernels.hpp>

#include "compression_choice.hpp"
#include "io.hpp"
#include "shard.hpp"
#include "step.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace sigma::checkpoint {

uint64_t TensorView::bytes() const {
  return format::tensor_bytes(dtype, shape, "checkpoint: tensor " + name, Code::invalid_argument);
}

TensorView replicated(TensorView v) {
  v.layout = Layout::replicated;
  v.global_shape = v.shape;
  return v;
}

TensorView split(TensorView v, int32_t dim, int64_t offset, std::vector<int64_t> global_shape) {
  v.layout = Layout::split;
  v.split_dim = dim;
  v.split_offset = offset;
  v.global_shape = std::move(global_shape);
  return v;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool on_device(const TensorView& v) { return v.plugin != nullptr && !v.plugin->host_addressable(v.device); }

void check_views(const std::vector<TensorView>& views) {
  std::set<std::string> names;
  for (const auto& v : views) {
    if (v.name.empty() || !names.insert(v.name).second)
      throw Error(Code::invalid_argument, "checkpoint: tensor name '" + v.name + "' is empty or repeated");
    if (v.data == nullptr && v.bytes() > 0)
      throw Error(Code::invalid_argument, "checkpoint: tensor " + v.name + " is NULL");
    format::check_layout(v.layout, v.split_dim, v.split_offset, v.shape,
                         v.layout == Layout::replicated && v.global_shape.empty() ? v.shape : v.global_shape,
                         v.dtype, "checkpoint: tensor " + v.name, Code::invalid_argument);
  }
}

shard::HostTensor host_tensor(const TensorView& v, const uint8_t* p, uint64_t n) {
  shard::HostTensor h;
  static_cast<TensorSpec&>(h) = v;
  h.data = p;
  h.bytes = n;
  // Only a split tensor has a place; a replicated one's global shape is its shape.
  if (v.layout != Layout::split) {
    h.split_dim = 0;
    h.split_offset = 0;
    h.global_shape = v.layout == Layout::replicated ? v.shape : std::vector<int64_t>{};
  }
  return h;
}

// A staged copy of the state, in host memory.
struct Staged {
  std::vector<shard::HostTensor> views;  // point into `owned` (or into the caller's memory)
  std::vector<shard::Bytes> owned;
  uint64_t bytes = 0;
};

// Host buffers kept from earlier snapshots, by size: a fresh buffer costs a
// page fault per page on first touch, several times the copy itself.
using Pool = std::multimap<uint64_t, shard::Bytes>;

shard::Bytes take(Pool* pool, uint64_t n) {
  if (pool) {
    auto it = pool->find(n);
    if (it != pool->end()) {
      shard::Bytes b = std::move(it->second);
      pool->erase(it);
      return b;
    }
  }
  return shard::Bytes(n);
}

struct Copy {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t bytes;
};

// Copies every tensor into host memory (through the HAL for device memory),
// into buffers from `pool` where it has them. With `deferred`, the copies of
// host memory are left there for the caller to run.
Staged stage(const std::vector<TensorView>& views, bool copy_host, Pool* pool = nullptr,
             std::vector<Copy>* deferred = nullptr) {
  constexpr uint64_t kCopyBlock = uint64_t{8} << 20;
  std::vector<Copy> copies;
  Staged s;
  s.owned.resize(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorView& v = views[i];
    const uint64_t n = v.bytes();
    const uint8_t* p = static_cast<const uint8_t*>(v.data);
    if (on_device(v)) {
      s.owned[i] = take(pool, n);
      v.plugin->check(v.plugin->api().device->memcpy(v.device, s.owned[i].data(), v.data, n,
                                                     HAL_COPY_DEVICE_TO_HOST, nullptr),
                      "memcpy (checkpoint snapshot)");
      p = s.owned[i].data();
    } else if (copy_host) {
      s.owned[i] = take(pool, n);
      for (uint64_t off = 0; off < n; off += kCopyBlock)
        copies.push_back({s.owned[i].data() + off, p + off, std::min(kCopyBlock, n - off)});
      p = s.owned[i].data();
    }
    s.views.push_back(host_tensor(v, p, n));
    s.bytes += n;
  }
  if (deferred) {
    *deferred = std::move(copies);
    return s;
  }
  // The host copies in blocks on oneTBB's threads: one core does not reach
  // the memory's bandwidth, and this copy is all the caller waits for.
  tbb::parallel_for(size_t{0}, copies.size(),
                    [&](size_t k) { std::memcpy(copies[k].dst, copies[k].src, copies[k].bytes); });
  return s;
}

}  // namespace

struct Engine::Impl {
  Options o;
  std::string job;

  // The writer's state; `mu` guards everything below.
  std::mutex mu;
  std::condition_variable cv;
  struct Pending {
    uint64_t step;
    Staged staged;
    Metadata meta;
    SaveResult result;
  };
  std::deque<Pending> queue;
  uint64_t pending_bytes = 0;
  bool busy = false, stop = false;
  bool snapshotting = false;  // an overlapped snapshot's copy is running
  std::thread snapper;        // ...on this thread
  std::string failure;        // the first background failure, thrown at the next call
  Code failure_code = Code::ok;
  std::vector<SaveResult> done;
  Pool pool;                       // staging buffers to reuse
  std::vector<uint64_t> prefault;  // sizes of staging buffers the writer makes ready (reserve())
  std::thread writer;

  // Only the thread that writes (the writer, or the caller of save() after
  // draining the queue) touches these.
  std::unique_ptr<shard::Base> base;
  uint64_t since_base = 0;
  bool reload_tried = false;

  void log(const std::string& s) const {
    if (o.log) o.log(s);
  }

  // Writes one checkpoint; makes it the base when it is one. `owned`: the
  // staged bytes may be moved into the base.
  // After a restart: the base this rank's newest checkpoint before `step`
  // deltas against (or that checkpoint, when it is a base), decoded and
  // verified, so that the chain goes on instead of starting with a base.
  void reload_base(uint64_t step, const std::vector<shard::HostTensor>& views) {
    reload_tried = true;
    if (o.base_every <= 1) return;
    std::vector<uint64_t> steps;
    for (const auto& name : io::list_dir(job)) {
      uint64_t st;
      if (format::parse_step(name, st) && st < step && io::exists(format::shard_dir(job, st, o.rank)))
        steps.push_back(st);
    }
    std::sort(steps.rbegin(), steps.rend());
    const uint64_t cb = std::max<uint64_t>(8, o.chunk_bytes / 8 * 8);
    for (uint64_t st : steps) {
      try {
        const shard::Shard newest = shard::open(format::shard_dir(job, st, o.rank));
        const shard::Shard b = newest.manifest.base_step < 0 ? newest : *shard::open_base(newest);
        if (b.manifest.world != o.world) return;
        auto nb = std::make_unique<shard::Base>();
        nb->step = b.manifest.step;
        nb->chunk_bytes = cb;
        for (const auto& v : views) {
          const format::Tensor* t = nullptr;
          for (const auto& x : b.manifest.tensors)
            if (x.name == v.name) t = &x;
          if (t == nullptr || t->dtype != v.dtype || t->bytes != v.bytes)
            return;  // another layout: a new base
          for (size_t k = 0; k + 1 < t->chunks.size(); ++k)
            if (t->chunks[k].raw_size != cb) return;  // saved with another chunk size
          auto& bt = nb->tensors[v.name];
          bt.dtype = t->dtype;
          bt.bytes = shard::Bytes(t->bytes);
          shard::read_tensor(b, *t, nullptr, bt.bytes.data());
          for (const auto& c : t->chunks) {
            bt.hashes.push_back(c.raw_xxh3);
            bt.stored.push_back(c.stored_size);
          }
        }
        since_base = 0;
        for (uint64_t x : steps)
          if (x > nb->step) ++since_base;  // deltas of it, or of a base that is gone
        log("checkpoint: rank " + std::to_string(o.rank) +
            " continues differential saves against the base of step " + std::to_string(nb->step) +
            " (reloaded from disk)");
        base = std::move(nb);
      } catch (const Error& e) {
        log(std::string(e.what()) + "; the next save is a base");
      }
      return;
    }
  }

  SaveResult persist(uint64_t step, Staged& s, const Metadata& meta) {
    if (base == nullptr && !reload_tried) reload_base(step, s.views);
    bool as_base = base == nullptr || o.base_every <= 1 || since_base + 1 >= o.base_every;
    if (!as_base) {
      // A new tensor, or one whose size or dtype changed, needs a new base.
      for (const auto& t : s.views) {
        auto it = base->tensors.find(t.name);
        if (it == base->tensors.end() || it->second.bytes.size() != t.bytes || it->second.dtype != t.dtype)
          as_base = true;
      }
    }
    std::vector<std::vector<format::Chunk>> records;
    // A new base keeps the raw bytes: a staged copy becomes the base as it
    // is (no copy); the caller's own memory (a synchronous save) is copied
    // by the encoder, chunk by chunk while each is in cache.
    std::unique_ptr<shard::Base> nb;
    std::vector<uint8_t*> copy_to(s.views.size(), nullptr);
    if (as_base) {
      nb = std::make_unique<shard::Base>();
      nb->step = step;
      nb->chunk_bytes = std::max<uint64_t>(8, o.chunk_bytes / 8 * 8);
      for (size_t i = 0; i < s.views.size(); ++i) {
        auto& t = nb->tensors[s.views[i].name];
        t.dtype = s.views[i].dtype;
        if (i < s.owned.size() && !s.owned[i].empty()) {
          t.bytes = std::move(s.owned[i]);
        } else {
          std::lock_guard lk(mu);
          t.bytes = take(&pool, s.views[i].bytes);
          copy_to[i] = t.bytes.data();
        }
      }
    }
    SaveResult r = shard::write(o, step, s.views, meta, as_base ? nullptr : base.get(), &records, &copy_to);
    if (!r.note.empty()) log(r.note);
    if (as_base) {
      if (base) {
        // The old base's buffers stage the next snapshots.
        std::lock_guard lk(mu);
        for (auto& [name, t] : base->tensors) pool.emplace(t.bytes.size(), std::move(t.bytes));
      }
      for (size_t i = 0; i < s.views.size(); ++i) {
        auto& t = nb->tensors[s.views[i].name];
        for (const auto& c : records[i]) {
          t.hashes.push_back(c.raw_xxh3);
          t.stored.push_back(c.stored_size);
        }
      }
      base = std::move(nb);
      since_base = 0;
    } else {
      ++since_base;
    }
    try {
      r.step_complete = step::finalize(job, step, o.world);
    } catch (const Error& e) {
      log(std::string(e.what()) + "; step " + std::to_string(step) + " has no global manifest");
    }
    collect_garbage();
    return r;
  }

  // Removes this rank's shard of `step` (the step's global manifest first:
  // the step is no longer whole), and the step's folder once it is empty.
  void remove_shard(uint64_t step) {
    const std::string sd = format::step_dir(job, step);
    io::remove_tree(step::manifest_path(sd));
    io::remove_tree(format::shard_dir(job, step, o.rank));
    bool shards_left = false;
    for (const auto& name : io::list_dir(sd)) {
      uint32_t r;
      shards_left |= format::parse_rank(name, r);
    }
    if (!shards_left) io::remove_tree(sd);
  }

  // Keeps the newest `keep` checkpoints of this rank and the bases they
  // need; removes the rest of this rank's shards (and emptied step folders).
  void collect_garbage() {
    std::vector<std::pair<uint64_t, int64_t>> shards;  // step, base step
    for (const auto& name : io::list_dir(job)) {
      uint64_t step;
      if (!format::parse_step(name, step)) continue;
      const std::string path = format::shard_dir(job, step, o.rank);
      if (!io::exists(path + "/" + format::kManifest)) continue;
      int64_t base_step = -1;
      try {
        base_step = shard::open(path).manifest.base_step;
      } catch (const Error&) {
        // A damaged shard is kept: it is evidence, and restore skips it.
        continue;
      }
      shards.emplace_back(step, base_step);
    }
    std::sort(shards.rbegin(), shards.rend());
    std::set<uint64_t> keep;
    for (size_t i = 0; i < shards.size() && i < o.keep; ++i) {
      keep.insert(shards[i].first);
      if (shards[i].second >= 0) keep.insert(static_cast<uint64_t>(shards[i].second));
    }
    if (base) keep.insert(base->step);  // the next deltas need it
    for (const auto& [step, b] : shards) {
      (void)b;
      if (!keep.count(step)) remove_shard(step);
    }
  }

  // Staging buffers of these sizes, every page touched, into the pool.
  // Called without `mu`; memory that cannot be had is left to the saves.
  void make_ready(const std::vector<uint64_t>& sizes) {
    std::vector<shard::Bytes> made;
    try {
      for (uint64_t n : sizes) {
        shard::Bytes b(n);
        std::memset(b.data(), 0, n);
        made.push_back(std::move(b));
      }
    } catch (const Error& e) {
      log(std::string("checkpoint: staging memory not reserved: ") + e.what());
    }
    std::lock_guard lk(mu);
    for (auto& b : made) pool.emplace(b.size(), std::move(b));
  }

  void run_writer() {
    std::unique_lock lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stop || !queue.empty() || !prefault.empty(); });
      if (!prefault.empty()) {
        std::vector<uint64_t> sizes;
        sizes.swap(prefault);
        lk.unlock();
        make_ready(sizes);
        lk.lock();
        continue;
      }
      if (queue.empty()) return;
      Pending p = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lk.unlock();
      SaveResult r;
      std::string err;
      Code code = Code::ok;
      try {
        r = persist(p.step, p.staged, p.meta);
        r.blocked_s = p.result.blocked_s;
        r.backpressure_s = p.result.backpressure_s;
      } catch (const Error& e) {
        err = e.what(), code = e.code();
      } catch (const std::exception& e) {
        err = e.what(), code = Code::internal;
      }
      lk.lock();
      busy = false;
      pending_bytes -= p.staged.bytes;
      for (auto& b : p.staged.owned)
        if (!b.empty()) pool.emplace(b.size(), std::move(b));
      // Keep at most one snapshot's worth.
      while (pool.size() > 2 * p.staged.owned.size() + 8) pool.erase(pool.begin());
      if (!err.empty() && failure.empty()) failure = err, failure_code = code;
      if (err.empty())
        done.push_back(r);
      else
        log("checkpoint: background save of step " + std::to_string(p.step) + " failed: " + err);
      cv.notify_all();
    }
  }

  void rethrow_failure() {
    if (failure.empty()) return;
    std::string f = std::move(failure);
    failure.clear();
    throw Error(failure_code, f);
  }

  // Waits until no snapshot is being copied and the writer has nothing
  // queued or running.
  void drain(std::unique_lock<std::mutex>& lk) {
    cv.wait(lk, [&] { return !snapshotting && queue.empty() && !busy; });
  }
};

Engine::Engine(Options options) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  if (options.dir.empty()) throw Error(Code::invalid_argument, "checkpoint: Options::dir is empty");
  if (options.job.empty() || options.job.find('/') != std::string::npos || options.job[0] == '.')
    throw Error(Code::invalid_argument,
                "checkpoint: job name '" + options.job + "' must be a plain folder name");
  if (options.world == 0 || options.rank >= options.world)
    throw Error(Code::invalid_argument, "checkpoint: rank " + std::to_string(options.rank) + " of world " +
                                            std::to_string(options.world));
  if (options.chunk_bytes < 4096 || options.chunk_bytes > format::kMaxChunkBytes)
    throw Error(Code::invalid_argument, "checkpoint: chunk_bytes " + std::to_string(options.chunk_bytes) +
                                            " outside [4096, " + std::to_string(format::kMaxChunkBytes) +
                                            "]");
  if (options.keep == 0) throw Error(Code::invalid_argument, "checkpoint: keep must be >= 1");
  if (options.zstd_level < -7 || options.zstd_level > 19)
    throw Error(Code::invalid_argument,
                "checkpoint: zstd_level " + std::to_string(options.zstd_level) + " outside [-7, 19]");
  if (options.compression > Compression::never)
    throw Error(Code::invalid_argument, "checkpoint: unknown compression mode " +
                                            std::to_string(static_cast<int>(options.compression)));
  for (const double r : {options.disk_read_bytes_per_s, options.disk_write_bytes_per_s})
    if (!(r >= 0) || std::isinf(r))
      throw Error(Code::invalid_argument, "checkpoint: a disk rate of " + std::to_string(r) +
                                              " bytes/s (give a positive rate, or 0 to measure it)");
  m.o = std::move(options);
  m.job = format::job_dir(m.o);
  io::make_dirs(m.job);
  // Leftovers of this rank's saves that a crash interrupted.
  const std::string mine = "-rank-" + std::to_string(m.o.rank) + "-";
  for (const auto& name : io::list_dir(m.job))
    if (name.rfind(".tmp-step-", 0) == 0 && name.find(mine) != std::string::npos)
      io::remove_tree(m.job + "/" + name);
  m.writer = std::thread([this] { impl_->run_writer(); });
}

Engine::~Engine() {
  auto& m = *impl_;
  {
    std::unique_lock lk(m.mu);
    m.drain(lk);
    m.stop = true;
  }
  m.cv.notify_all();
  if (m.snapper.joinable()) m.snapper.join();
  m.writer.join();
}

void Engine::reserve(const std::vector<TensorView>& tensors) {
  auto& m = *impl_;
  check_views(tensors);
  {
    std::lock_guard lk(m.mu);
    for (int set = 0; set < 2; ++set)  // the differential base and the next save's staging
      for (const auto& v : tensors) m.prefault.push_back(v.bytes());  // host copies of device views too
  }
  m.cv.notify_all();
}

SaveResult Engine::save(const std::vector<TensorView>& tensors, const Metadata& meta) {
  auto& m = *impl_;
  check_views(tensors);
  const auto t0 = Clock::now();
  {
    std::unique_lock lk(m.mu);
    m.drain(lk);  // one writer at a time, in step order
    m.rethrow_failure();
  }
  Staged s = stage(tensors, /*copy_host=*/false);
  SaveResult r = m.persist(meta.step, s, meta);
  r.blocked_s = seconds_since(t0);
  return r;
}

SaveResult Engine::save_async(const std::vector<TensorView>& tensors, const Metadata& meta, Snapshot mode) {
  auto& m = *impl_;
  check_views(tensors);
  const auto t0 = Clock::now();
  uint64_t bytes = 0;
  for (const auto& v : tensors) bytes += v.bytes();
  const uint64_t limit = m.o.max_pending_bytes ? m.o.max_pending_bytes : 2 * bytes;
  SaveResult r;
  r.step = meta.step;
  {
    std::unique_lock lk(m.mu);
    m.cv.wait(lk, [&] { return !m.snapshotting; });  // one snapshot copy at a time
    m.rethrow_failure();
    if (m.pending_bytes > 0 && m.pending_bytes + bytes > limit) {
      const auto w0 = Clock::now();
      m.cv.wait(lk, [&] { return m.pending_bytes == 0 || m.pending_bytes + bytes <= limit; });
      r.backpressure_s = seconds_since(w0);
      m.log("checkpoint: the writer is behind; step " + std::to_string(meta.step) + " waited " +
            std::to_string(r.backpressure_s) + " s for it (back-pressure, staging bound " +
            std::to_string(limit) + " bytes)");
      m.rethrow_failure();
    }
    m.pending_bytes += bytes;  // reserved before the copy, so two callers cannot both fit
  }
  Pool mine;
  {
    std::lock_guard lk(m.mu);
    mine.swap(m.pool);
  }
  Staged s;
  std::vector<Copy> deferred;
  try {
    s = stage(tensors, /*copy_host=*/true, &mine, mode == Snapshot::overlapped ? &deferred : nullptr);
    std::lock_guard lk(m.mu);
    m.pool.merge(mine);
  } catch (...) {
    std::lock_guard lk(m.mu);
    m.pending_bytes -= bytes;
    m.cv.notify_all();
    throw;
  }
  r.blocked_s = seconds_since(t0);
  if (mode == Snapshot::now) {
    {
      std::lock_guard lk(m.mu);
      m.queue.push_back({meta.step, std::move(s), meta, r});
    }
    m.cv.notify_all();
    return r;
  }
  // Overlapped: the copy runs on a thread of its own (one core: the point
  // is to leave the others to the training step, not to be fast), then the
  // snapshot goes to the writer.
  if (m.snapper.joinable()) m.snapper.join();
  {
    std::lock_guard lk(m.mu);
    m.snapshotting = true;
  }
  m.snapper = std::thread([&m, s = std::move(s), deferred = std::move(deferred), meta, r]() mutable {
    for (const Copy& c : deferred) std::memcpy(c.dst, c.src, c.bytes);
    {
      std::lock_guard lk(m.mu);
      m.queue.push_back({meta.step, std::move(s), meta, r});
      m.snapshotting = false;
    }
    m.cv.notify_all();
  });
  return r;
}

double Engine::wait_snapshot() {
  auto& m = *impl_;
  const auto t0 = Clock::now();
  std::unique_lock lk(m.mu);
  m.cv.wait(lk, [&] { return !m.snapshotting; });
  return seconds_since(t0);
}

std::vector<SaveResult> Engine::wait() {
  auto& m = *impl_;
  std::unique_lock lk(m.mu);
  m.drain(lk);
  m.rethrow_failure();
  std::vector<SaveResult> out;
  out.swap(m.done);
  return out;
}

void Engine::discard_after(uint64_t step) {
  auto& m = *impl_;
  std::unique_lock lk(m.mu);
  m.drain(lk);
  for (const auto& name : io::list_dir(m.job)) {
    uint64_t s;
    if (format::parse_step(name, s) && s > step && io::exists(format::shard_dir(m.job, s, m.o.rank)))
      m.remove_shard(s);
  }
  if (m.base && m.base->step > step) {
    m.base.reset();  // the next save starts a new chain
    m.since_base = 0;
  }
}

std::vector<SaveResult> Engine::poll() {
  auto& m = *impl_;
  std::unique_lock lk(m.mu);
  m.rethrow_failure();
  std::vector<SaveResult> out;
  out.swap(m.done);
  return out;
}

RestoreResult Engine::restore(const std::vector<TensorView>& tensors, Metadata* meta, uint64_t newest_step) {
  auto& m = *impl_;
  check_views(tensors);
  {
    std::unique_lock lk(m.mu);
    m.drain(lk);
  }
  RestoreResult res;
  std::vector<uint64_t> steps;
  for (const auto& name : io::list_dir(m.job)) {
    uint64_t step;
    if (format::parse_step(name, step) && step <= newest_step) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  // Host views are decoded in place once every compressed byte they need
  // has been checked (no scratch copy of the state: fresh memory costs a
  // page fault per page: the views are offered to huge pages), raw chunks
  // read straight into place and checked there; device views through
  // scratch host memory.
  std::vector<uint8_t*> direct(tensors.size(), nullptr);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!on_device(tensors[i]) && tensors[i].bytes() > 0) {
      direct[i] = static_cast<uint8_t*>(tensors[i].data);
      shard::offer_huge_pages(direct[i], tensors[i].bytes());
    }
  for (uint64_t step : steps) {
    const std::string sd = format::step_dir(m.job, step);
    const std::string own = format::shard_dir(m.job, step, m.o.rank);
    std::vector<shard::Bytes> decoded;
    Metadata man;
    try {
      const std::optional<format::StepManifest> g = step::load(sd);
      if (g) {
        step::Read rd = step::read(sd, *g, m.o.rank, m.o.world, tensors, decoded, direct);
        man = std::move(rd.meta);
        if (!rd.local_from_same_rank.empty())
          m.log("checkpoint: step " + std::to_string(step) + " was saved on " + std::to_string(g->world) +
                " ranks; rank " + std::to_string(m.o.rank) + " of " + std::to_string(m.o.world) + " reads " +
                std::to_string(rd.local_from_same_rank.size()) + " local tensor(s) (" +
                rd.local_from_same_rank.front() + ", ...) from old rank " + std::to_string(m.o.rank) +
                "'s shard");
        res.saved_world = g->world;
        res.resharded = rd.resharded;
        res.path = rd.resharded ? sd : own;
      } else {
        // Incomplete (or the ranks write to disks of their own): this
        // rank's shard, on the same world size only.
        if (!io::exists(own)) continue;
        const shard::Shard s = shard::open(own);
        if (s.manifest.world != m.o.world) {
          m.log("checkpoint: step " + std::to_string(step) + " has no global manifest and was saved on " +
                std::to_string(s.manifest.world) + " ranks; it cannot be re-sharded to " +
                std::to_string(m.o.world));
          continue;
        }
        const std::unique_ptr<shard::Shard> base = shard::open_base(s);
        decoded.resize(tensors.size());
        std::vector<const format::Tensor*> recs(tensors.size(), nullptr);
        for (size_t i = 0; i < tensors.size(); ++i) {
          const TensorView& v = tensors[i];
          for (const auto& x : s.manifest.tensors)
            if (x.name == v.name) recs[i] = &x;
          if (recs[i] == nullptr)
            throw Error(Code::invalid_argument, "checkpoint: " + own + " has no tensor " + v.name);
          if (recs[i]->dtype != v.dtype || recs[i]->shape != v.shape)
            throw Error(Code::invalid_argument, "checkpoint: tensor " + v.name + " in " + own +
                                                    " has another dtype or shape than the view");
          if (direct[i] != nullptr) {
            shard::verify_stored(s, *recs[i], base.get());
          } else {
            decoded[i] = shard::Bytes(recs[i]->bytes);
            shard::read_tensor(s, *recs[i], base.get(), decoded[i].data());
          }
        }
        for (size_t i = 0; i < tensors.size(); ++i)
          if (direct[i] != nullptr) shard::read_tensor(s, *recs[i], base.get(), direct[i]);
        man = s.manifest.meta;
        res.saved_world = s.manifest.world;
        res.path = own;
      }
    } catch (const Error& e) {
      if (e.code() != Code::data_loss) throw;
      res.refused.push_back(e.what());
      m.log(std::string(e.what()) + "; falling back to an older checkpoint");
      continue;
    }
    // Everything decoded and verified: only now copy what went through
    // scratch memory into the caller's state.
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorView& v = tensors[i];
      const uint64_t n = v.bytes();
      if (n == 0 || decoded[i].empty()) continue;
      if (on_device(v))
        v.plugin->check(v.plugin->api().device->memcpy(v.device, v.data, decoded[i].data(), n,
                                                       HAL_COPY_HOST_TO_DEVICE, nullptr),
                        "memcpy (checkpoint restore)");
      else
        std::memcpy(v.data, decoded[i].data(), n);
    }
    if (meta) *meta = man;
    res.step = step;
    return res;
  }
  std::string why = "checkpoint: no good checkpoint for rank " + std::to_string(m.o.rank) + " of " +
                    std::to_string(m.o.world) + " in " + m.job;
  for (const auto& r : res.refused) why += "\n  " + r;
  throw Error(Code::data_loss, why);
}

namespace {

std::string codec_name(uint8_t codec) {
  switch (codec) {
    case format::kShuffleZstd:
      return "zstd";
    case format::kXorShuffleZstd:
      return "xor+zstd";
    case format::kSameAsBase:
      return "unchanged";
    default:
      return "raw";
  }
}

// Why the writer chose a chunk's codec, from what it recorded: "" where no
// choice was made (an unchanged chunk; format 1 compressed every chunk).
std::string why(const format::Chunk& c, const format::CompressionRecord& cr) {
  if (c.codec == format::kSameAsBase || cr.threads == 0) return "";
  const choice::Sample sm{c.sample.ratio, c.sample.encode, c.sample.decode, c.sample.base};
  if (cr.mode != Compression::automatic)
    return cr.mode == Compression::always ? "zstd (forced)" : "raw (forced)";
  const choice::Costs k = choice::costs(sm, {cr.disk_read, cr.disk_write}, cr.threads);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "sampled ratio %.3f; ", c.sample.ratio);
  return ratio + choice::explain(c.codec != format::kRaw, k);
}

ShardInfo info_of(const shard::Shard& s) {
  ShardInfo i;
  i.path = s.path;
  i.step = s.manifest.step;
  i.rank = s.manifest.rank;
  i.world = s.manifest.world;
  i.base_step = s.manifest.base_step;
  i.format_version = s.manifest.format_version;
  i.stored_bytes = s.manifest.data_bytes;
  i.meta = s.manifest.meta;
  const format::CompressionRecord& cr = s.manifest.compression;
  i.compression = cr.mode;
  i.disk_read_bytes_per_s = cr.disk_read;
  i.disk_write_bytes_per_s = cr.disk_write;
  i.threads = cr.threads;
  for (const auto& t : s.manifest.tensors) {
    ShardInfo::Tensor x;
    static_cast<TensorSpec&>(x) = t;
    x.bytes = t.bytes;
    x.chunks = t.chunks.size();
    for (const auto& c : t.chunks) {
      x.stored_bytes += c.stored_size;
      x.chunks_unchanged += c.codec == format::kSameAsBase;
      x.chunks_raw += c.codec == format::kRaw;
      x.chunks_compressed += c.codec == format::kShuffleZstd || c.codec == format::kXorShuffleZstd;
      x.chunk_list.push_back({c.offset, c.raw_size, c.stored_size, codec_name(c.codec), why(c, cr)});
    }
    i.raw_bytes += t.bytes;
    i.tensors.push_back(std::move(x));
  }
  return i;
}

}  // namespace

std::vector<ShardInfo> Engine::list() const {
  std::vector<ShardInfo> all = list_shards(impl_->job), mine;
  for (auto& s : all)
    if (s.rank == impl_->o.rank) mine.push_back(std::move(s));
  return mine;
}

ShardInfo inspect(const std::string& shard_path) { return info_of(shard::open(shard_path)); }

void verify(const std::string& shard_path) {
  const shard::Shard s = shard::open(shard_path);
  const std::unique_ptr<shard::Shard> base = shard::open_base(s);
  // Chunk by chunk: the memory a verify needs is bounded by the chunk size,
  // not by what a (possibly hostile) manifest says a tensor holds.
  for (const auto& t : s.manifest.tensors) shard::check_tensor(s, t, base.get());
  shard::check_padding(s);
}

std::vector<ShardInfo> list_shards(const std::string& job_dir) {
  std::vector<ShardInfo> out;
  for (const auto& sname : io::list_dir(job_dir)) {
    uint64_t step;
    if (!format::parse_step(sname, step)) continue;
    for (const auto& rname : io::list_dir(job_dir + "/" + sname)) {
      uint32_t rank;
      if (!format::parse_rank(rname, rank)) continue;
      try {
        out.push_back(inspect(job_dir + "/" + sname + "/" + rname));
      } catch (const Error& e) {
        ShardInfo bad;
        bad.path = job_dir + "/" + sname + "/" + rname;
        bad.step = step;
        bad.rank = rank;
        bad.base_step = -2;  // unreadable: see verify
        out.push_back(bad);
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const ShardInfo& a, const ShardInfo& b) {
    return a.step != b.step ? a.step > b.step : a.rank < b.rank;
  });
  return out;
}

bool finalize_step(const std::string& job_dir, uint64_t step) { return step::finalize(job_dir, step); }

std::vector<StepInfo> list_steps(const std::string& job_dir) {
  std::vector<StepInfo> out;
  for (const auto& name : io::list_dir(job_dir)) {
    StepInfo i;
    if (!format::parse_step(name, i.step)) continue;
    i.path = job_dir + "/" + name;
    for (const auto& rname : io::list_dir(i.path)) {
      uint32_t r;
      if (format::parse_rank(rname, r) && io::exists(i.path + "/" + rname + "/" + format::kManifest))
        i.ranks.push_back(r);
    }
    std::sort(i.ranks.begin(), i.ranks.end());
    try {
      if (auto g = step::load(i.path)) {
        i.complete = true;
        i.world = g->world;
      } else {
        i.problem = "no global manifest: " + std::to_string(i.ranks.size()) + " shard(s) present";
        if (!i.ranks.empty())
          i.world = shard::open(format::shard_dir(job_dir, i.step, i.ranks.front())).manifest.world;
      }
    } catch (const Error& e) {
      i.complete = false;
      i.problem = e.what();
    }
    out.push_back(std::move(i));
  }
  std::sort(out.begin(), out.end(), [](const StepInfo& a, const StepInfo& b) { return a.step > b.step; });
  return out;
}

void verify_step(const std::string& step_path, bool shards_too) {
  const std::optional<format::StepManifest> g = step::load(step_path);
  if (!g)
    throw Error(Code::data_loss,
                "checkpoint: " + step::manifest_path(step_path) + ": missing (the step is incomplete)");
  for (uint32_t r = 0; r < g->world; ++r) {
    const std::string shard = format::shard_dir(step_path.substr(0, step_path.find_last_of('/')), g->step, r);
    const std::string mpath = shard + "/" + format::kManifest;
    const std::vector<uint8_t> bytes = io::read_file(mpath, format::kMaxManifestBytes);
    if (bytes.size() != g->shards[r].manifest_bytes ||
        kernels::checksum(bytes.data(), bytes.size()) != g->shards[r].manifest_xxh3)
      throw Error(Code::data_loss, "checkpoint: " + mpath +
                                       ": not the shard the step manifest recorded (size or xxh3 differs)");
    // What the shard's own manifest says of its data file and base must be
    // what the step recorded (the data file itself is verify's to read).
    const format::Manifest sm = format::decode(bytes, mpath);
    if (sm.data_bytes != g->shards[r].data_bytes || sm.base_step != g->shards[r].base_step)
      throw Error(Code::data_loss,
                  "checkpoint: " + step::manifest_path(step_path) + ": rank " + std::to_string(r) +
                      " recorded with " + std::to_string(g->shards[r].data_bytes) + " data bytes and base " +
                      std::to_string(g->shards[r].base_step) + ", the shard has " +
                      std::to_string(sm.data_bytes) + " and " + std::to_string(sm.base_step));
    if (shards_too) verify(shard);
  }
}

}  // namespace sigma::checkpoint
