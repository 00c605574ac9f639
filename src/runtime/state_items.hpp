// The session's non-tensor state: named items (runtime::StateItem) and the
// data windows rollbacks skipped, laid out in one byte region that the
// memory tier and the disk checkpoints hold as the tensor "sigma.items".
// Each item has a fixed place, [u32 length][max_bytes]; bytes are written
// only when a snapshot or checkpoint is taken (save), read back after the
// session restored the region (restore). The skipped windows are the
// session's own item, kept on rollback. Pure but for the items' callbacks.
//
// Thread-safety: the training thread's. Not copyable (the view points here).
#pragma once

#include <sigma/checkpoint.hpp>
#include <sigma/runtime.hpp>

#include <cstdint>
#include <utility>
#include <vector>

namespace sigma::runtime {

class StateItems {
 public:
  static constexpr const char* kTensor = "sigma.items";
  static constexpr const char* kSkipped = "sigma.skipped_batches";
  static constexpr uint64_t kMaxWindows = 256;

  StateItems();
  StateItems(const StateItems&) = delete;
  StateItems& operator=(const StateItems&) = delete;

  // Throws Error(invalid_argument): an empty or taken name, a missing
  // callback. Moves the region: take view() again.
  void add(StateItem item);
  // The region as the tensor the snapshots hold.
  checkpoint::TensorView view();

  // Every item's bytes into the region. Throws Error(invalid_argument) for
  // an item whose save returns more than its max_bytes.
  void save();
  // The region's bytes back to every item; after a rollback, not to those
  // kept on rollback (the skipped windows among them). Throws
  // Error(data_loss) for a region no save wrote (a length past its place,
  // windows out of order).
  void restore(bool rollback);

  // The batch of `step`: the step-th batch not skipped.
  uint64_t batch_of(uint64_t step) const;
  // Batches [begin, end) are never trained on; windows kept merged.
  void skip(uint64_t begin, uint64_t end);
  const std::vector<std::pair<uint64_t, uint64_t>>& skipped() const noexcept { return skipped_; }

 private:
  struct Slot {
    StateItem item;
    uint64_t offset;  // of its length word in region_
  };
  std::vector<Slot> slots_;
  std::vector<uint8_t> region_;
  std::vector<std::pair<uint64_t, uint64_t>> skipped_;
};

}  // namespace sigma::runtime
