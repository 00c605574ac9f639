// The DP x EP x PP layout (pure arithmetic) and the communicators of one
// rank's groups.
#include <sigma/parallel.hpp>

#include <exception>
#include <string>

namespace sigma::parallel {

namespace {

constexpr GroupKind kKinds[] = {
    GroupKind::data,          GroupKind::expert,        GroupKind::expert_data,       GroupKind::pipeline,
    GroupKind::pipeline_grad, GroupKind::pipeline_wrap, GroupKind::pipeline_grad_wrap};

}  // namespace

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::data:
      return "data";
    case GroupKind::expert:
      return "expert";
    case GroupKind::expert_data:
      return "expert_data";
    case GroupKind::pipeline:
      return "pipeline";
    case GroupKind::pipeline_grad:
      return "pipeline_grad";
    case GroupKind::pipeline_wrap:
      return "pipeline_wrap";
    case GroupKind::pipeline_grad_wrap:
      return "pipeline_grad_wrap";
  }
  return "unknown";
}

void check_layout(const Layout& layout, uint32_t world) {
  const std::string shape = "layout dp=" + std::to_string(layout.dp) + " ep=" + std::to_string(layout.ep) +
                            " pp=" + std::to_string(layout.pp) + " vpp=" + std::to_string(layout.vpp);
  if (layout.dp == 0 || layout.ep == 0 || layout.pp == 0 || layout.vpp == 0)
    throw Error(Code::invalid_argument, shape + ": every degree must be at least 1");
  if (layout.vpp > 1 && layout.pp == 1)
    throw Error(Code::invalid_argument, shape + ": interleaving (vpp > 1) needs two pipeline stages or more");
  if (layout.dp % layout.ep != 0)
    throw Error(Code::invalid_argument, shape + ": ep must divide dp (experts fold into data parallelism)");
  if (static_cast<uint64_t>(layout.dp) * layout.pp != world)
    throw Error(Code::invalid_argument,
                shape + ": dp * pp = " + std::to_string(static_cast<uint64_t>(layout.dp) * layout.pp) +
                    " but the world has " + std::to_string(world) + " ranks");
}

Coords coords_of(const Layout& layout, uint32_t rank) {
  check_layout(layout, layout.world());
  if (rank >= layout.world())
    throw Error(Code::invalid_argument,
                "rank " + std::to_string(rank) + " outside a world of " + std::to_string(layout.world()));
  Coords c;
  c.stage = rank / layout.dp;
  c.dp_index = rank % layout.dp;
  c.ep_index = c.dp_index % layout.ep;
  c.edp_index = c.dp_index / layout.ep;
  return c;
}

std::vector<uint32_t> group_members(const Layout& layout, uint32_t rank, GroupKind kind) {
  const Coords c = coords_of(layout, rank);
  const uint32_t base = c.stage * layout.dp;
  std::vector<uint32_t> out;
  switch (kind) {
    case GroupKind::data:
      for (uint32_t i = 0; i < layout.dp; ++i) out.push_back(base + i);
      break;
    case GroupKind::expert:
      for (uint32_t i = 0; i < layout.ep; ++i) out.push_back(base + c.edp_index * layout.ep + i);
      break;
    case GroupKind::expert_data:
      for (uint32_t i = 0; i < layout.dp / layout.ep; ++i) out.push_back(base + i * layout.ep + c.ep_index);
      break;
    case GroupKind::pipeline:
    case GroupKind::pipeline_grad:
    case GroupKind::pipeline_wrap:
    case GroupKind::pipeline_grad_wrap:
      for (uint32_t s = 0; s < layout.pp; ++s) out.push_back(s * layout.dp + c.dp_index);
      break;
  }
  return out;
}

uint32_t group_index(const Layout& layout, uint32_t rank, GroupKind kind) {
  const Coords c = coords_of(layout, rank);
  switch (kind) {
    case GroupKind::data:
      return c.stage;
    case GroupKind::expert:
      return c.stage * (layout.dp / layout.ep) + c.edp_index;
    case GroupKind::expert_data:
      return c.stage * layout.ep + c.ep_index;
    case GroupKind::pipeline:
    case GroupKind::pipeline_grad:
    case GroupKind::pipeline_wrap:
    case GroupKind::pipeline_grad_wrap:
      return c.dp_index;
  }
  return 0;
}

ExpertRange expert_range(uint32_t num_experts, uint32_t ep, uint32_t ep_index) {
  if (ep == 0 || num_experts == 0 || num_experts % ep != 0)
    throw Error(Code::invalid_argument, "expert parallelism " + std::to_string(ep) + " must divide the " +
                                            std::to_string(num_experts) + " experts");
  if (ep_index >= ep)
    throw Error(Code::invalid_argument, "expert-group rank " + std::to_string(ep_index) +
                                            " outside a group of " + std::to_string(ep));
  const uint32_t per = num_experts / ep;
  return {ep_index * per, per};
}

// One group's bootstrap and communicator; the bootstrap outlives the
// communicator (members are destroyed in reverse order).
struct Groups::Group {
  bootstrap::HalBootstrap bootstrap;
  std::unique_ptr<hal::Communicator> comm;
  uint32_t rank = 0, size = 0;
  Group(std::shared_ptr<bootstrap::Store> store, std::string prefix)
      : bootstrap(std::move(store), std::move(prefix)) {}
};

Groups::Groups(hal::PluginPtr plugin, std::shared_ptr<bootstrap::Store> store, const std::string& prefix,
               uint32_t device, uint32_t rank, const Layout& layout, std::chrono::nanoseconds timeout)
    : layout_(layout), coords_(coords_of(layout, rank)), rank_(rank), store_(store), prefix_(prefix) {
  for (GroupKind kind : kKinds) {
    if (layout.vpp == 1 && (kind == GroupKind::pipeline_wrap || kind == GroupKind::pipeline_grad_wrap)) {
      groups_.push_back(nullptr);  // none without interleaving
      continue;
    }
    const auto members = group_members(layout, rank, kind);
    uint32_t me = 0;
    while (members[me] != rank) ++me;
    auto g = std::make_unique<Group>(
        store, prefix + group_kind_name(kind) + "/" + std::to_string(group_index(layout, rank, kind)) + "/");
    g->rank = me;
    g->size = static_cast<uint32_t>(members.size());
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.device = device;
    ca.rank = me;
    ca.world_size = g->size;
    ca.bootstrap = g->bootstrap.table();
    ca.timeout_ns = static_cast<uint64_t>(timeout.count());
    try {
      g->comm = std::make_unique<hal::Communicator>(plugin, ca);
    } catch (const Error& e) {
      throw Error(e.code(), std::string("creating the ") + group_kind_name(kind) + " group " +
                                std::to_string(group_index(layout, rank, kind)) + " (rank " +
                                std::to_string(me) + " of " + std::to_string(g->size) + "): " + e.what());
    }
    groups_.push_back(std::move(g));
  }
}

Groups::~Groups() {
  // Communicators before their bootstraps, last group first.
  while (!groups_.empty()) groups_.pop_back();
}

void Groups::abort() {
  // Every group is aborted even when one refuses; the first refusal is thrown.
  std::exception_ptr first;
  for (auto& g : groups_) {
    if (!g) continue;
    try {
      g->comm->abort();
    } catch (const Error&) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

const Groups::Group& Groups::group(GroupKind kind) const {
  const auto& g = groups_.at(static_cast<size_t>(kind));
  if (!g)
    throw Error(Code::invalid_argument, std::string("no ") + group_kind_name(kind) +
                                            " group: the layout does not interleave (vpp 1)");
  return *g;
}

hal::Communicator& Groups::comm(GroupKind kind) const { return *group(kind).comm; }
uint32_t Groups::rank_in(GroupKind kind) const { return group(kind).rank; }
uint32_t Groups::size_of(GroupKind kind) const { return group(kind).size; }

}  // namespace sigma::parallel
