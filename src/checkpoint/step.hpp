// Internal: a step's global manifest (step-N/global.sgcs) -- making it from
// the ranks' committed shards, reading it, and restoring views through it,
// re-sharding when the world size changed.
#pragma once

#include "format.hpp"
#include "shard.hpp"

#include <optional>
#include <string>
#include <vector>

namespace sigma::checkpoint::step {

std::string manifest_path(const std::string& step_dir);

// The step's global manifest, verified; nullopt when there is none. Throws
// Error(data_loss) when there is one that does not read.
std::optional<format::StepManifest> load(const std::string& step_dir);

// See checkpoint::finalize_step. `world`, when known (not 0), spares
// reading manifests while fewer shards than that are present.
bool finalize(const std::string& job_dir, uint64_t step, uint32_t world = 0);

// Decodes what each view needs of the step into out[i] (views[i].bytes()
// bytes each; allocated here) and the metadata of rank `rank` (rank 0 when
// the saved world had no such rank). Every shard read is checked against
// the global manifest's record of it. Throws Error(data_loss) for damage,
// Error(invalid_argument) when the views do not fit what was saved.
struct Read {
  Metadata meta;
  bool resharded = false;
  // Local tensors read, on another world size, from the old rank with the
  // same number.
  std::vector<std::string> local_from_same_rank;
};
//
// `direct[i]`, when not NULL, is host memory of views[i]: a view read whole
// from this rank's own shard is decoded straight into it, after every
// tensor's stored bytes were read and checked (out[i] stays empty then).
Read read(const std::string& step_dir, const format::StepManifest& m, uint32_t rank, uint32_t world,
          const std::vector<TensorView>& views, std::vector<shard::Bytes>& out,
          const std::vector<uint8_t*>& direct);

}  // namespace sigma::checkpoint::step
