// A C++ program built against the installed package with find_package
// only: plans a small MoE with the planner and routes a few tokens.
#include <sigma/parallel.hpp>
#include <sigma/planner.hpp>

#include <cstdio>

int main() {
  sigma::planner::Model m;
  m.layers = 8;
  m.hidden = 1024;
  m.ffn = 2816;
  m.heads = m.kv_heads = 16;
  m.vocab = 32000;
  m.experts = 8;
  m.top_k = 2;
  m.seq = 2048;
  m.global_batch = 64;
  sigma::planner::Devices d;
  d.count = 16;
  d.peak_tflops = 312;
  const auto plans = sigma::planner::search(m, d, sigma::planner::Space::runtime());
  if (plans.empty()) return 1;
  const float logits[] = {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0};
  sigma::parallel::RouterOptions ro;
  ro.num_experts = 8;
  ro.top_k = 2;
  const auto r = sigma::parallel::route(logits, 2, ro);
  std::printf("c++ consumer: %s, %.1f%% MFU; token 0 -> experts %d, %d\n",
              sigma::planner::describe(plans[0].layout).c_str(), 100 * plans[0].score.mfu, r.expert_ids[0],
              r.expert_ids[1]);
  return r.expert_ids[0] == 7 && r.expert_ids[1] == 6 ? 0 : 1;
}
