// Whether the memory tiers of a host's ranks fit its memory, checked before
// a job starts so that an oversized one is refused with its numbers instead
// of dying of the OOM killer mid-training.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace sigma::runtime {

// The host's available memory (MemAvailable of /proc/meminfo), in bytes; 0
// when it cannot be read.
uint64_t host_memory_available();

// Pure. `host_ranks` ranks of a `state_bytes` state each keep `keep` own
// snapshots and `keep` of each of `replicas` peers' (MemoryTier::footprint);
// nullopt when they fit in `available` bytes, else why not, with the
// numbers. `available` names where the figure came from (`source`).
std::optional<std::string> tier_unfit(uint64_t state_bytes, size_t keep, uint32_t replicas,
                                      uint32_t host_ranks, uint64_t available, const std::string& source);

}  // namespace sigma::runtime
