// Internal: which saved bytes fill which part of each view when a step is
// restored, decided from the step's global manifest and the shards' tensor
// records alone (pure: no file is opened here; `Lookup` hands records in).
// step::read opens the shards the plan names and carries it out.
#pragma once

#include "format.hpp"

#include <sigma/checkpoint.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sigma::checkpoint::plan {

// Old rank `rank`'s record of tensor `name`, or nullptr when its shard has
// none. May open the shard (the executor's I/O); may throw Error(data_loss).
using Lookup = std::function<const format::Tensor*(uint32_t rank, const std::string& name)>;

// `rows` rows of `row_bytes` bytes: row k comes from byte
// src_offset + k * src_stride of old rank `rank`'s tensor (whose shape must
// be `src_shape`) and goes to byte dst_offset + k * dst_stride of the view.
struct Copy {
  uint32_t rank = 0;
  std::vector<int64_t> src_shape;
  uint64_t rows = 0, row_bytes = 0;
  uint64_t src_offset = 0, src_stride = 0;
  uint64_t dst_offset = 0, dst_stride = 0;
};

struct View {
  enum class Source {
    whole,   // the whole of `rank`'s record (this rank's own, or the same-numbered old rank's)
    slices,  // pieces of old tensors (re-sharding)
  };
  Source source = Source::whole;
  uint32_t rank = 0;
  bool own = false;  // whole, from this rank's own shard on the same world (may decode in place)
  std::vector<Copy> copies;
};

struct Plan {
  std::vector<View> views;
  bool resharded = false;
  // Local tensors read, on another world size, from the old rank with the
  // same number.
  std::vector<std::string> local_from_same_rank;
  uint32_t meta_rank = 0;  // whose metadata the restore returns
};

// The plan for rank `rank` of `world` to restore `views` from the step whose
// global manifest is `m` (in `step_dir`, for messages). Throws
// Error(invalid_argument) when a view does not fit what was saved (a
// missing tensor, another dtype or global shape, a local tensor on another
// world size that no same-numbered rank holds, another split dimension) and
// Error(data_loss) when a shard's record contradicts the manifest.
Plan make(const format::StepManifest& m, const std::string& step_dir, uint32_t rank, uint32_t world,
          const std::vector<TensorView>& views, const Lookup& lookup);

}  // namespace sigma::checkpoint::plan
