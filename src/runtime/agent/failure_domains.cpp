#include "runtime/agent/failure_domains.hpp"

#include <sigma/replica_placement.hpp>

#include <algorithm>

namespace sigma::runtime::agent {

uint32_t host_of_device(const AgentOptions& o, uint32_t device) {
  const uint32_t world = o.nproc * o.nnodes;
  return device < world ? device / o.nproc : (device - world) / std::max(1u, o.spares);
}

FailureDomains::FailureDomains(const AgentOptions& o) : racks_(o.nodes_per_group > 0) {
  const uint32_t world = o.nproc * o.nnodes, per_host = o.nproc + o.spares;
  const uint32_t per_node = o.devices_per_node == 0 ? per_host : o.devices_per_node;
  const uint32_t nodes_per_host = (per_host + per_node - 1) / per_node;
  for (uint32_t d = 0; d < o.nnodes * per_host; ++d) {
    const uint32_t host = host_of_device(o, d);
    // Its place among its host's devices: the ranks, then the spares.
    const uint32_t local = d < world ? d % o.nproc : o.nproc + (d - world) % std::max(1u, o.spares);
    node_.push_back(host * nodes_per_host + local / per_node);
    rack_.push_back(racks_ ? host / o.nodes_per_group : 0);
  }
}

FailureDomains::Placement FailureDomains::place(const std::vector<uint32_t>& devices,
                                                uint32_t replicas) const {
  Placement p;
  if (racks_) {
    for (uint32_t d : devices) p.domains.push_back(rack(d));
    if (checkpoint::ReplicaPlacement::across(p.domains, replicas).cross_domain()) {
      p.across = "rack";
      return p;
    }
    p.domains.clear();
  }
  for (uint32_t d : devices) p.domains.push_back(node(d));
  const auto where = checkpoint::ReplicaPlacement::across(p.domains, replicas);
  p.across = where.cross_domain() ? "node" : where.crossing() > 0 ? "node (the first replica)" : "shared";
  return p;
}

}  // namespace sigma::runtime::agent
