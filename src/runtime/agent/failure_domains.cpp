#include "runtime/agent/failure_domains.hpp"

#include <sigma/replica_placement.hpp>

#include <algorithm>

namespace sigma::runtime::agent {

uint32_t host_of_device(const AgentOptions& o, uint32_t device) {
  const uint32_t world = o.nproc * o.nnodes;
  return device < world ? device / o.nproc : (device - world) / std::max(1u, o.spares);
}

FailureDomains::FailureDomains(const AgentOptions& o)
    : rack_names_(o.nnodes), groups_(o.nodes_per_group > 0) {
  rack_names_[0] = o.rack;  // the root's own
  const uint32_t world = o.nproc * o.nnodes, per_host = o.nproc + o.spares;
  const uint32_t per_node = o.devices_per_node == 0 ? per_host : o.devices_per_node;
  const uint32_t nodes_per_host = (per_host + per_node - 1) / per_node;
  for (uint32_t d = 0; d < o.nnodes * per_host; ++d) {
    const uint32_t host = host_of_device(o, d);
    // Its place among its host's devices: the ranks, then the spares.
    const uint32_t local = d < world ? d % o.nproc : o.nproc + (d - world) % std::max(1u, o.spares);
    node_.push_back(host * nodes_per_host + local / per_node);
    host_.push_back(host);
    group_.push_back(groups_ ? host / o.nodes_per_group : 0);
  }
}

void FailureDomains::name_rack(uint32_t host, const std::string& name) {
  if (host < rack_names_.size()) rack_names_[host] = name;
}

bool FailureDomains::named() const {
  return std::none_of(rack_names_.begin(), rack_names_.end(), [](const std::string& n) { return n.empty(); });
}

uint32_t FailureDomains::rack(uint32_t device) const {
  if (!named()) return group_.at(device);
  const std::string& mine = rack_names_.at(host_.at(device));
  // The first host that named it numbers the rack.
  return static_cast<uint32_t>(std::find(rack_names_.begin(), rack_names_.end(), mine) - rack_names_.begin());
}

FailureDomains::Placement FailureDomains::place(const std::vector<uint32_t>& devices,
                                                uint32_t replicas) const {
  Placement p;
  if (groups_ || named()) {
    for (uint32_t d : devices) p.domains.push_back(rack(d));
    if (checkpoint::ReplicaPlacement::across(p.domains, replicas).cross_domain()) {
      p.across = "rack";
      return p;
    }
    p.domains.clear();
  }
  for (uint32_t d : devices) p.domains.push_back(node(d));
  const auto where = checkpoint::ReplicaPlacement::across(p.domains, replicas);
  uint32_t crossing = 0;  // ranks whose first replica is in another node
  for (uint32_t r = 0; r < where.world() && where.replicas() > 0; ++r)
    crossing += p.domains[where.holder(r, 0)] != p.domains[r] ? 1 : 0;
  if (where.cross_domain())
    p.across = "node";
  else if (where.crossing() > 0)
    p.across = "node (the first replica)";
  else if (crossing > 0)
    p.across = "node (" + std::to_string(crossing) + " of " + std::to_string(where.world()) + " ranks)";
  else
    p.across = "shared";
  return p;
}

}  // namespace sigma::runtime::agent
