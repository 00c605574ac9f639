// The agent's failure domains, without processes: options in, each
// device's node and rack and the domains a world's replicas go across out.
#include "runtime/agent/failure_domains.hpp"

#include <gtest/gtest.h>

namespace sigma::runtime::agent {
namespace {

AgentOptions layout(uint32_t nproc, uint32_t spares, uint32_t nnodes, uint32_t per_node, uint32_t per_group) {
  AgentOptions o;
  o.nproc = nproc;
  o.spares = spares;
  o.nnodes = nnodes;
  o.devices_per_node = per_node;
  o.nodes_per_group = per_group;
  return o;
}

TEST(FailureDomains, OneHostWithNothingDeclaredIsOneNodeAndTheReplicasShareIt) {
  const FailureDomains f(layout(3, 1, 1, 0, 0));
  for (uint32_t d = 0; d < 4; ++d) EXPECT_EQ(f.node(d), 0u);
  const auto p = f.place({0, 1, 2}, 1);
  EXPECT_EQ(p.across, "shared");
  EXPECT_EQ(p.domains, (std::vector<uint32_t>{0, 0, 0}));
}

TEST(FailureDomains, DeclaredNodesSplitAHostsRanksThenItsSpares) {
  // 4 ranks and 2 spares in nodes of 2: ranks 0,1 | 2,3 | spares 4,5.
  const FailureDomains f(layout(4, 2, 1, 2, 0));
  EXPECT_EQ(std::vector<uint32_t>({f.node(0), f.node(1), f.node(2), f.node(3), f.node(4), f.node(5)}),
            (std::vector<uint32_t>{0, 0, 1, 1, 2, 2}));
  auto p = f.place({0, 1, 2, 3}, 1);
  EXPECT_EQ(p.across, "node");
  EXPECT_EQ(p.domains, (std::vector<uint32_t>{0, 0, 1, 1}));
  // Node 1 lost: its ranks now run on the spares' node.
  p = f.place({0, 1, 4, 5}, 1);
  EXPECT_EQ(p.across, "node");
  EXPECT_EQ(p.domains, (std::vector<uint32_t>{0, 0, 2, 2}));
}

TEST(FailureDomains, HostsAreNodesAndHostGroupsAreRacksWhereTheyCanBeCrossed) {
  // 2 hosts of 2 ranks + 1 spare each: devices 0,1 host 0; 2,3 host 1;
  // spares 4 (host 0), 5 (host 1).
  const FailureDomains hosts(layout(2, 1, 2, 0, 0));
  EXPECT_EQ(std::vector<uint32_t>({hosts.node(0), hosts.node(2), hosts.node(4), hosts.node(5)}),
            (std::vector<uint32_t>{0, 1, 0, 1}));
  EXPECT_EQ(hosts.place({0, 1, 2, 3}, 1).across, "node");
  // 4 hosts in racks of 2: the replicas go to the other rack.
  const FailureDomains racks(layout(1, 0, 4, 0, 2));
  auto p = racks.place({0, 1, 2, 3}, 1);
  EXPECT_EQ(p.across, "rack");
  EXPECT_EQ(p.domains, (std::vector<uint32_t>{0, 0, 1, 1}));
  // Two replicas cannot both leave a rack of two racks: nodes then; on two
  // nodes, only the first leaves its node.
  p = racks.place({0, 1, 2, 3}, 2);
  EXPECT_EQ(p.across, "node");
  EXPECT_EQ(p.domains, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(FailureDomains(layout(4, 0, 1, 2, 0)).place({0, 1, 2, 3}, 2).across, "node (the first replica)");
  // Three of four ranks on one host: the ring along the hosts crosses twice.
  EXPECT_EQ(hosts.place({0, 1, 2, 4}, 1).across, "node (2 of 4 ranks)");
}

TEST(FailureDomains, RacksEveryHostNamesComeBeforeHostGroups) {
  // 4 hosts of one rank, in groups of 2 (0,1 | 2,3); the hosts name racks
  // that cut across the groups: a | b | a | b.
  AgentOptions o = layout(1, 0, 4, 0, 2);
  o.rack = "a";
  FailureDomains f(o);
  f.name_rack(1, "b");
  f.name_rack(2, "a");
  EXPECT_EQ(f.place({0, 1, 2, 3}, 1).domains, (std::vector<uint32_t>{0, 0, 1, 1}))
      << "host 3 unnamed: groups";
  f.name_rack(3, "b");
  const auto p = f.place({0, 1, 2, 3}, 1);
  EXPECT_EQ(p.across, "rack");
  EXPECT_EQ(p.domains, (std::vector<uint32_t>{0, 1, 0, 1}));
}

}  // namespace
}  // namespace sigma::runtime::agent
