#include "runtime/tier_fit.hpp"

#include <sigma/memory_tier.hpp>

#include <cstdio>
#include <fstream>

namespace sigma::runtime {
namespace {

std::string mib(uint64_t bytes) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return out;
}

}  // namespace

uint64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

std::optional<std::string> tier_unfit(uint64_t state_bytes, size_t keep, uint32_t replicas,
                                      uint32_t host_ranks, uint64_t available, const std::string& source) {
  const uint64_t per_rank = checkpoint::MemoryTier::footprint(state_bytes, keep, replicas);
  const uint64_t need = per_rank * host_ranks;
  if (need <= available) return std::nullopt;
  const uint64_t copies = per_rank / (state_bytes == 0 ? 1 : state_bytes);
  return "the memory tier does not fit this host: its " + std::to_string(host_ranks) + " rank(s) need " +
         std::to_string(host_ranks) + " x " + std::to_string(copies) + " x " + mib(state_bytes) + " = " +
         mib(need) + " (" + std::to_string(keep + 1) + " own snapshots and " + std::to_string(keep) +
         " of each of " + std::to_string(replicas) + " replica(s) kept, " + std::to_string(replicas) +
         " arriving), and " + source + " is " + mib(available) +
         "; lower --snapshot-keep or --replicas, or run fewer ranks per host";
}

}  // namespace sigma::runtime
