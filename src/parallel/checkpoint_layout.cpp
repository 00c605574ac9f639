// The layout in a checkpoint's metadata, and expert blocks as split views:
// what lets a job restore onto another world size with its experts
// re-sharded.
#include <sigma/parallel.hpp>

#include <nlohmann/json.hpp>

namespace sigma::parallel {

std::string layout_json(const Layout& l, uint32_t num_experts) {
  return nlohmann::json{{"dp", l.dp}, {"ep", l.ep}, {"pp", l.pp}, {"vpp", l.vpp}, {"experts", num_experts}}
      .dump();
}

Layout parse_layout_json(const std::string& text, uint32_t* num_experts) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    throw Error(Code::invalid_argument, "parallel plan: not a JSON object: " + text.substr(0, 200));
  const auto degree = [&](const char* key) -> uint32_t {
    if (!j.contains(key) || !j[key].is_number_unsigned() || j[key].get<uint64_t>() == 0 ||
        j[key].get<uint64_t>() > (1u << 24))
      throw Error(Code::invalid_argument,
                  std::string("parallel plan: '") + key + "' must be a whole number >= 1");
    return j[key].get<uint32_t>();
  };
  Layout l;
  l.dp = degree("dp");
  l.ep = degree("ep");
  l.pp = degree("pp");
  if (j.contains("vpp")) l.vpp = degree("vpp");  // absent before interleaving existed
  const uint32_t experts = degree("experts");
  check_layout(l, l.world());
  expert_range(experts, l.ep, 0);  // ep divides the experts
  if (num_experts) *num_experts = experts;
  return l;
}

checkpoint::TensorView expert_shard(checkpoint::TensorView view, uint32_t num_experts, uint32_t ep,
                                    uint32_t ep_index) {
  const ExpertRange r = expert_range(num_experts, ep, ep_index);
  if (view.shape.empty() || view.shape[0] != static_cast<int64_t>(r.count))
    throw Error(Code::invalid_argument, "expert_shard: tensor " + view.name + " must hold its " +
                                            std::to_string(r.count) + " experts along dimension 0");
  std::vector<int64_t> global = view.shape;
  global[0] = num_experts;
  return checkpoint::split(std::move(view), 0, r.first, std::move(global));
}

}  // namespace sigma::parallel
