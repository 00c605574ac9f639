// A search's result as JSON: what `sigma-plan --json` prints and the C
// API's sigma_plan returns.
#include <sigma/planner.hpp>

#include <nlohmann/json.hpp>

#include <chrono>

namespace sigma::planner {

namespace {

nlohmann::json to_json(const Candidate& c) {
  const auto& l = c.layout;
  const auto& s = c.score;
  return {{"layout",
           {{"tp", l.tp},
            {"pp", l.pp},
            {"dp", l.dp},
            {"ep", l.ep},
            {"cp", l.cp},
            {"vpp", l.vpp},
            {"micro_batch", l.micro_batch},
            {"recompute", recompute_name(l.recompute)},
            {"sharding", sharding_name(l.sharding)}}},
          {"devices", c.devices},
          {"max_experts_per_rank", c.max_experts_per_rank},
          {"step_s", s.step_s},
          {"tokens_per_s", s.tokens_per_s},
          {"mfu", s.mfu},
          {"memory_gib", s.memory_gib},
          {"fits", s.fits},
          {"breakdown_s",
           {{"compute", s.compute_s},
            {"tp", s.tp_s},
            {"cp", s.cp_s},
            {"ep", s.ep_s},
            {"pp", s.pp_s},
            {"bubble", s.bubble_s},
            {"dp", s.dp_s}}}};
}

}  // namespace

std::string plans_json(const Request& q, const std::vector<Candidate>& best, double search_s) {
  nlohmann::json out = {{"model", q.model.name},
                        {"devices", q.devices.count},
                        {"search_s", search_s},
                        {"model_flops_per_token", model_flops_per_token(q.model)},
                        {"plans", nlohmann::json::array()}};
  for (const auto& c : best) out["plans"].push_back(to_json(c));
  return out.dump(1);
}

std::string plan_json(const std::string& yaml_text, const std::string& name, size_t top) {
  Request q = parse_request(yaml_text, name);
  if (top) q.top = top;
  const auto t0 = std::chrono::steady_clock::now();
  const auto best = search(q.model, q.devices, q.space, q.framework, q.efficiency, q.top);
  return plans_json(q, best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace sigma::planner
