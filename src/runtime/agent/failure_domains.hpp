// Which devices fail together, for the agent's Coordinator: a device's node
// (its host, or a declared part of it: --devices-per-node) and its rack
// (named by every host: --rack or Slurm's topology; else a group of hosts:
// --nodes-per-group), and the domains a world's memory-tier replicas are
// placed across (sigma/replica_placement.hpp): racks when every replica can
// go to another rack, else nodes, else the shared ring.
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
  // Its rack: by name once every host has named one, else its host group.
  uint32_t rack(uint32_t device) const;
  // Host `host` says it is in rack `name` (empty: it does not know).
  void name_rack(uint32_t host, const std::string& name);

  struct Placement {
    std::vector<uint32_t> domains;  // rank r's domain at r, what the workers place replicas across
    // "rack", "node" (every replica in another), "node (the first replica)"
    // (two nodes, two replicas), "node (N of W ranks)" (one node holds over
    // half of the ranks: only those at its edges cross), or "shared" (one
    // node: the ring).
    std::string across;
  };
  // For a world whose rank r runs on `devices[r]`, with `replicas` each.
  Placement place(const std::vector<uint32_t>& devices, uint32_t replicas) const;

 private:
  std::vector<uint32_t> node_, host_, group_;  // by device
  std::vector<std::string> rack_names_;        // by host
  bool groups_ = false;                        // --nodes-per-group was given
  bool named() const;                          // every host named its rack
};

}  // namespace sigma::runtime::agent
