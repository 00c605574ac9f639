// Which devices fail together, for the agent's Coordinator: a device's node
// (its host, or a declared part of it: --devices-per-node) and its rack (a
// group of hosts: --nodes-per-group), and the domains a world's memory-tier
// replicas are placed across (sigma/replica_placement.hpp): racks when every
// replica can go to another rack, else nodes, else the shared ring.
//
// Pure: options in, domains out. Thread-safety: const members from any
// thread.
#pragma once

#include <sigma/agent.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::runtime::agent {

// The agent's numbering of devices: host h's `nproc` ranks first (devices
// h * nproc ...), then after every host's ranks, its `spares`.
uint32_t host_of_device(const AgentOptions& o, uint32_t device);

class FailureDomains {
 public:
  explicit FailureDomains(const AgentOptions& o);

  uint32_t node(uint32_t device) const { return node_.at(device); }
  uint32_t rack(uint32_t device) const { return rack_.at(device); }

  struct Placement {
    std::vector<uint32_t> domains;  // rank r's domain at r, what the workers place replicas across
    // "rack", "node" (every replica in another), "node (the first replica)"
    // (two nodes, two replicas), or "shared" (the ring: no domain would do).
    std::string across;
  };
  // For a world whose rank r runs on `devices[r]`, with `replicas` each.
  Placement place(const std::vector<uint32_t>& devices, uint32_t replicas) const;

 private:
  std::vector<uint32_t> node_, rack_;  // by device
  bool racks_ = false;                 // racks were given
};

}  // namespace sigma::runtime::agent
