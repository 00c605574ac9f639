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
  peer,    // contained recovery: the live state of a counterpart in a healthy replica
};

// "none", "memory", "disk" or "peer".
constexpr const char* name(RestoreTier t) {
  switch (t) {
    case RestoreTier::none:
      return "none";
    case RestoreTier::memory:
      return "memory";
    case RestoreTier::disk:
      return "disk";
    case RestoreTier::peer:
      return "peer";
  }
  return "?";
}

// The tier a name stands for; nullopt for any other text.
constexpr std::optional<RestoreTier> restore_tier_named(std::string_view s) {
  for (RestoreTier t : {RestoreTier::none, RestoreTier::memory, RestoreTier::disk, RestoreTier::peer})
    if (s == name(t)) return t;
  return std::nullopt;
}

}  // namespace sigma::runtime
