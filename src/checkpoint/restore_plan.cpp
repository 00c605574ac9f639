#include "restore_plan.hpp"

#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <algorithm>

namespace sigma::checkpoint::plan {
namespace {

int64_t prod(const std::vector<int64_t>& v, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= v[i];
  return p;
}

[[noreturn]] void bad(const std::string& step_dir, uint32_t rank, const std::string& what) {
  throw Error(Code::data_loss, "checkpoint: " + step_dir + " rank " + std::to_string(rank) + ": " + what);
}

// Whether this rank's own saved record is the view itself: same shape, and
// the same place in the global tensor where that matters.
bool same_place(const format::Tensor* t, const format::GlobalTensor& rec, const TensorView& v) {
  if (t == nullptr || t->shape != v.shape) return false;
  if (v.layout == Layout::local || rec.layout == Layout::local) return true;
  if (t->layout != v.layout) return false;
  return v.layout != Layout::split || (t->split_dim == v.split_dim && t->split_offset == v.split_offset &&
                                       t->global_shape == v.global_shape);
}

// Re-sharding: the view covers [lo, hi) of the split dimension of a
// row-major tensor; each saved piece that overlaps gives `outer` rows.
std::vector<Copy> slices(const format::GlobalTensor& rec, const TensorView& v, uint32_t rank,
                         uint32_t old_world, const std::string& what) {
  const std::vector<int64_t>& vg = v.layout == Layout::split ? v.global_shape : v.shape;
  // A replicated tensor is one piece: the whole of it, from the old rank
  // with this rank's number modulo the old world, or the first holding it.
  std::vector<format::Piece> pieces = rec.pieces;
  int32_t dim = rec.split_dim;
  if (rec.layout == Layout::replicated) {
    format::Piece p = pieces.front();
    for (const auto& q : pieces)
      if (q.rank == rank % old_world) p = q;
    dim = v.layout == Layout::split ? v.split_dim : 0;
    p.offset = 0;
    p.length = vg.empty() ? 1 : vg[static_cast<size_t>(dim)];
    pieces = {p};
  } else if (v.layout == Layout::split && v.split_dim != dim) {
    throw Error(Code::invalid_argument, what + ": the view is split along dimension " +
                                            std::to_string(v.split_dim) + ", the checkpoint along " +
                                            std::to_string(dim) +
                                            "; re-sharding along another dimension is not supported");
  }
  const uint64_t es = hal::dtype_size(v.dtype);
  const auto d = static_cast<size_t>(dim);
  const uint64_t outer = vg.empty() ? 1 : static_cast<uint64_t>(prod(vg, 0, d));
  const uint64_t inner = vg.empty() ? es : static_cast<uint64_t>(prod(vg, d + 1, vg.size())) * es;
  const int64_t lo = v.layout == Layout::split ? v.split_offset : 0;
  const int64_t hi = lo + (vg.empty() ? 1 : (v.layout == Layout::split ? v.shape[d] : vg[d]));
  std::vector<Copy> out;
  const format::Piece* last = nullptr;
  for (const auto& p : pieces) {
    // Replicas of one slice (pieces sorted by offset, then rank): read the
    // first; it holds the same bytes.
    if (last != nullptr && p.offset == last->offset && p.length == last->length) continue;
    last = &p;
    const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.length);
    if (a >= b) continue;
    Copy c;
    c.rank = p.rank;
    c.src_shape = vg;
    if (!c.src_shape.empty()) c.src_shape[d] = p.length;
    c.rows = outer;
    c.row_bytes = static_cast<uint64_t>(b - a) * inner;
    c.src_offset = static_cast<uint64_t>(a - p.offset) * inner;
    c.src_stride = static_cast<uint64_t>(p.length) * inner;
    c.dst_offset = static_cast<uint64_t>(a - lo) * inner;
    c.dst_stride = static_cast<uint64_t>(hi - lo) * inner;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

Plan make(const format::StepManifest& m, const std::string& step_dir, uint32_t rank, uint32_t world,
          const std::vector<TensorView>& views, const Lookup& lookup) {
  Plan plan;
  const bool same_world = m.world == world;
  for (const TensorView& v : views) {
    const std::string what = "checkpoint: tensor " + v.name + " of " + step_dir;
    const format::GlobalTensor* rec = nullptr;
    for (const auto& t : m.tensors)
      if (t.name == v.name) rec = &t;
    if (rec == nullptr) throw Error(Code::invalid_argument, what + ": the step has no such tensor");
    if (rec->dtype != v.dtype) throw Error(Code::invalid_argument, what + ": saved with another dtype");
    View out;
    const bool local = v.layout == Layout::local || rec->layout == Layout::local;
    // The same world size and the same place: this rank's own shard.
    if (same_world) {
      if (same_place(lookup(rank, v.name), *rec, v)) {
        out.rank = rank;
        out.own = true;
        plan.views.push_back(std::move(out));
        continue;
      }
      if (local)
        throw Error(Code::invalid_argument, what + ": rank " + std::to_string(rank) +
                                                "'s saved tensor has another shape than the view");
    }
    if (local) {
      // Another world size: the old rank with the same number, when there
      // is one and its tensor fits (a data-parallel job's ranks hold the
      // same state); anything else needs a layout to re-shard by.
      bool held = false;
      for (const auto& p : rec->pieces) held |= p.rank == rank;
      if (held) {
        const format::Tensor* t = lookup(rank, v.name);
        if (t == nullptr)
          bad(step_dir, rank, "has no tensor " + v.name + ", which the step manifest says it holds");
        if (t->shape == v.shape) {
          out.rank = rank;
          plan.local_from_same_rank.push_back(v.name);
          plan.views.push_back(std::move(out));
          continue;
        }
      }
      throw Error(Code::invalid_argument,
                  what + ": local to each rank (saved on " + std::to_string(m.world) +
                      " ranks, restoring rank " + std::to_string(rank) + " of " + std::to_string(world) +
                      "); re-sharding needs it saved and viewed as replicated or split");
    }
    const std::vector<int64_t>& vg = v.layout == Layout::split ? v.global_shape : v.shape;
    if (vg != rec->global_shape)
      throw Error(Code::invalid_argument, what + ": saved with another global shape");
    out.source = View::Source::slices;
    out.copies = slices(*rec, v, rank, m.world, what);
    for (const Copy& c : out.copies) {
      const format::Tensor* t = lookup(c.rank, v.name);
      if (t == nullptr)
        bad(step_dir, c.rank, "has no tensor " + v.name + ", which the step manifest says it holds");
      if (t->dtype != v.dtype || t->shape != c.src_shape)
        bad(step_dir, c.rank,
            "tensor " + v.name + " does not have the shape the step manifest gives its slice");
    }
    plan.resharded = true;
    plan.views.push_back(std::move(out));
  }
  plan.meta_rank = rank < m.world ? rank : 0;
  return plan;
}

}  // namespace sigma::checkpoint::plan
