// Where a generation's state comes from: decided by the restore planner,
// carried by Assign and Joined, applied by the session, counted by the
// simulator. On the wire and in the journal it is its name.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sigma::runtime {

enum class RestoreTier : uint8_t {
  none,    // a fresh start: no step was finished yet
  memory,  // the memory tier: own snapshots and peers' replicas
  disk,    // a committed disk checkpoint
};

// "none", "memory" or "disk".
constexpr const char* name(RestoreTier t) {
  switch (t) {
    case RestoreTier::none:
      return "none";
    case RestoreTier::memory:
      return "memory";
    case RestoreTier::disk:
      return "disk";
  }
  return "?";
}

// The tier a name stands for; nullopt for any other text.
constexpr std::optional<RestoreTier> restore_tier_named(std::string_view s) {
  for (RestoreTier t : {RestoreTier::none, RestoreTier::memory, RestoreTier::disk})
    if (s == name(t)) return t;
  return std::nullopt;
}

}  // namespace sigma::runtime
