#include "step.hpp"

#include "restore_plan.hpp"

#include "io.hpp"

#include <sigma/kernels.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>

namespace sigma::checkpoint::step {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(Code::data_loss, "checkpoint: " + path + ": " + what);
}

uint64_t now_unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string job_of(const std::string& step_dir) { return step_dir.substr(0, step_dir.find_last_of('/')); }

// Ranks whose shard folder of this step holds a committed manifest.
std::vector<uint32_t> ranks_present(const std::string& step_dir) {
  std::vector<uint32_t> ranks;
  for (const auto& name : io::list_dir(step_dir)) {
    uint32_t r;
    if (format::parse_rank(name, r) && io::exists(step_dir + "/" + name + "/" + format::kManifest))
      ranks.push_back(r);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

}  // namespace

std::string manifest_path(const std::string& step_dir) { return step_dir + "/" + format::kStepManifest; }

std::optional<format::StepManifest> load(const std::string& step_dir) {
  const std::string path = manifest_path(step_dir);
  if (!io::exists(path)) return std::nullopt;
  format::StepManifest m = format::decode_step(io::read_file(path, format::kMaxManifestBytes), path);
  // A manifest that decodes but names another step (copied or damaged)
  // would tie this folder to shards it does not hold.
  uint64_t folder_step = 0;
  if (format::parse_step(step_dir.substr(step_dir.find_last_of('/') + 1), folder_step) &&
      m.step != folder_step)
    bad(path, "records step " + std::to_string(m.step) + " but lies in the folder of step " +
                  std::to_string(folder_step));
  return m;
}

bool finalize(const std::string& job_dir, uint64_t step, uint32_t world) {
  const std::string sd = format::step_dir(job_dir, step);
  const std::vector<uint32_t> ranks = ranks_present(sd);
  // Most saves do not complete their step: a listing tells, before any
  // manifest is read.
  if (ranks.empty() || ranks.size() < world) return false;
  format::StepManifest g;
  g.step = step;
  g.created_unix_ns = now_unix_ns();
  std::map<std::string, size_t> index;  // tensor name -> g.tensors
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string path = format::shard_dir(job_dir, step, ranks[i]) + "/" + format::kManifest;
    const std::vector<uint8_t> bytes = io::read_file(path, format::kMaxManifestBytes);
    const format::Manifest m = format::decode(bytes, path);
    if (i == 0) {
      g.world = m.world;
      g.job = m.job;
      if (ranks.size() < m.world) return false;  // not every rank has committed yet
    }
    if (m.world != g.world || m.step != step || m.rank != ranks[i])
      bad(path, "rank " + std::to_string(m.rank) + " of world " + std::to_string(m.world) + " at step " +
                    std::to_string(m.step) + " does not belong to step " + std::to_string(step) +
                    " of world " + std::to_string(g.world));
    g.shards.push_back(
        {m.rank, bytes.size(), kernels::checksum(bytes.data(), bytes.size()), m.data_bytes, m.base_step});
    for (const auto& t : m.tensors) {
      auto [it, fresh] = index.emplace(t.name, g.tensors.size());
      if (fresh) {
        format::GlobalTensor x;
        x.name = t.name;
        x.dtype = t.dtype;
        x.layout = t.layout;
        x.split_dim = t.split_dim;
        x.global_shape = t.layout == Layout::local ? std::vector<int64_t>{} : t.global_shape;
        g.tensors.push_back(std::move(x));
      }
      format::GlobalTensor& x = g.tensors[it->second];
      if (x.dtype != t.dtype || x.layout != t.layout ||
          (t.layout != Layout::local && x.global_shape != t.global_shape) ||
          (t.layout == Layout::split && x.split_dim != t.split_dim))
        bad(path, "tensor " + t.name + ": dtype, layout or global shape differs from rank " +
                      std::to_string(x.pieces.front().rank) + "'s");
      if (t.layout == Layout::split)
        x.pieces.push_back({m.rank, t.split_offset, t.shape[static_cast<size_t>(t.split_dim)]});
      else
        x.pieces.push_back({m.rank, 0, 0});
    }
  }
  for (auto& t : g.tensors)
    if (t.layout == Layout::split)
      std::sort(t.pieces.begin(), t.pieces.end(), [](auto& a, auto& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.rank < b.rank;
      });
  const std::string path = manifest_path(sd);
  format::check_step(g, path);
  // Ranks that complete the step at once both write it; each through a
  // temporary file of its own, renamed into place (atomic), then the folder
  // synced.
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = sd + "/.tmp-global-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  const std::vector<uint8_t> bytes = format::encode_step(g);
  try {
    io::write_file(tmp, bytes.data(), bytes.size());
    io::rename(tmp, path);
  } catch (...) {
    io::remove_tree(tmp);
    throw;
  }
  io::sync_dir(sd);
  return true;
}

Read read(const std::string& step_dir, const format::StepManifest& m, uint32_t rank, uint32_t world,
          const std::vector<TensorView>& views, std::vector<shard::Bytes>& out,
          const std::vector<uint8_t*>& direct) {
  const std::string job = job_of(step_dir);
  struct Opened {
    shard::Shard s;
    std::unique_ptr<shard::Shard> base;
  };
  std::map<uint32_t, Opened> opened;
  // A shard of the step, checked to be the one the global manifest recorded
  // (not a shard of another save that happens to have the same step).
  auto open_rank = [&](uint32_t r) -> Opened& {
    auto it = opened.find(r);
    if (it != opened.end()) return it->second;
    const std::string path = format::shard_dir(job, m.step, r);
    const std::string mpath = path + "/" + format::kManifest;
    const std::vector<uint8_t> bytes = io::read_file(mpath, format::kMaxManifestBytes);
    const format::ShardRef& ref = m.shards[r];
    if (bytes.size() != ref.manifest_bytes ||
        kernels::checksum(bytes.data(), bytes.size()) != ref.manifest_xxh3)
      bad(mpath,
          "not the shard the step manifest " + manifest_path(step_dir) + " recorded (size or xxh3 differs)");
    Opened o{shard::open(path, bytes), nullptr};
    o.base = shard::open_base(o.s);
    return opened.emplace(r, std::move(o)).first->second;
  };
  auto record = [&](uint32_t r, const std::string& name) -> const format::Tensor* {
    for (const auto& t : open_rank(r).s.manifest.tensors)
      if (t.name == name) return &t;
    return nullptr;
  };
  const plan::Plan p = plan::make(m, step_dir, rank, world, views, record);

  // Carrying it out: whole tensors decode into out[i] (or, this rank's own
  // into the caller's host memory, deferred); slices decode the old tensor
  // and copy its rows.
  Read res;
  res.resharded = p.resharded;
  res.local_from_same_rank = p.local_from_same_rank;
  out.clear();
  out.resize(views.size());
  struct Deferred {
    size_t view;
    const format::Tensor* t;
  };
  std::vector<Deferred> deferred;  // decoded into direct[view] at the end
  for (size_t i = 0; i < views.size(); ++i) {
    const plan::View& vp = p.views[i];
    if (vp.source == plan::View::Source::whole) {
      Opened& o = open_rank(vp.rank);
      const format::Tensor* t = record(vp.rank, views[i].name);
      if (vp.own && i < direct.size() && direct[i] != nullptr) {
        deferred.push_back({i, t});
        continue;
      }
      out[i] = shard::Bytes(views[i].bytes());
      shard::read_tensor(o.s, *t, o.base.get(), out[i].data());
      continue;
    }
    out[i] = shard::Bytes(views[i].bytes());
    for (const plan::Copy& c : vp.copies) {
      Opened& o = open_rank(c.rank);
      const format::Tensor* t = record(c.rank, views[i].name);
      shard::Bytes piece(t->bytes);
      shard::read_tensor(o.s, *t, o.base.get(), piece.data());
      for (uint64_t k = 0; k < c.rows; ++k)
        std::memcpy(out[i].data() + c.dst_offset + k * c.dst_stride,
                    piece.data() + c.src_offset + k * c.src_stride, c.row_bytes);
    }
  }
  res.meta = open_rank(p.meta_rank).s.manifest.meta;
  // Every stored byte the direct views need checked before the first of
  // them is touched; then decoded in place (each chunk checked again).
  if (!deferred.empty()) {
    Opened& own = open_rank(rank);
    for (const auto& d : deferred) shard::verify_stored(own.s, *d.t, own.base.get());
    for (const auto& d : deferred) shard::read_tensor(own.s, *d.t, own.base.get(), direct[d.view]);
  }
  return res;
}

}  // namespace sigma::checkpoint::step
