// sigma-plan: the best layouts for a model on a set of devices.
//
//   sigma-plan REQUEST.yaml [--top N] [--devices N] [--json]
//
// REQUEST.yaml names the model, the devices, optionally the framework, the
// efficiency parameters and the search space (docs/parallel.md). Prints the
// best layouts with their predicted step time, tokens/s, MFU, memory and
// where the step's time goes; --json prints the same as one JSON object.
// Exit status: 0 with a plan, 1 when no layout fits, 2 for a bad request.
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace sigma;

namespace {

nlohmann::json to_json(const planner::Candidate& c) {
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
            {"recompute", planner::recompute_name(l.recompute)},
            {"sharding", planner::sharding_name(l.sharding)}}},
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

void print_text(const planner::Request& q, const std::vector<planner::Candidate>& best, double seconds) {
  std::printf("%s on %u devices: %zu best of the layouts that fit (searched in %.3f s)\n\n",
              q.model.name.empty() ? "model" : q.model.name.c_str(), q.devices.count, best.size(), seconds);
  std::printf("%-58s %9s %12s %6s %8s\n", "layout", "step s", "tokens/s", "MFU", "mem GiB");
  for (const auto& c : best)
    std::printf("%-58s %9.3f %12.0f %5.1f%% %8.1f\n", planner::describe(c.layout).c_str(), c.score.step_s,
                c.score.tokens_per_s, 100 * c.score.mfu, c.score.memory_gib);
  std::printf("\nwhere the step goes (%% of step):\n%-58s %7s %6s %6s %6s %6s %7s %6s\n", "layout", "compute",
              "tp", "cp", "ep", "pp", "bubble", "dp");
  for (const auto& c : best) {
    const auto& s = c.score;
    const auto pct = [&](double x) { return 100 * x / s.step_s; };
    std::printf("%-58s %6.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% %6.1f%% %5.1f%%\n",
                planner::describe(c.layout).c_str(), pct(s.compute_s), pct(s.tp_s), pct(s.cp_s), pct(s.ep_s),
                pct(s.pp_s), pct(s.bubble_s), pct(s.dp_s));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sigma-plan: the best DP x EP x PP (x TP x CP) layouts for a model on a set of devices"};
  std::string file;
  size_t top = 0;
  bool json = false;
  uint32_t devices = 0;
  app.add_option("request", file, "the request (YAML: model, devices, framework, efficiency, search)")
      ->required();
  app.add_option("--top", top, "how many layouts to show (default: the request's search.top, else 5)");
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--devices", devices, "plan for this many devices instead of the request's devices.count");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    std::ifstream in(file);
    if (!in) throw Error(Code::invalid_argument, file + ": cannot open");
    std::stringstream text;
    text << in.rdbuf();
    planner::Request q = planner::parse_request(text.str(), file);
    if (top) q.top = top;
    if (devices) q.devices.count = devices;
    const auto t0 = std::chrono::steady_clock::now();
    const auto best = planner::search(q.model, q.devices, q.space, q.framework, q.efficiency, q.top);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (json) {
      nlohmann::json out = {{"model", q.model.name},
                            {"devices", q.devices.count},
                            {"search_s", seconds},
                            {"model_flops_per_token", planner::model_flops_per_token(q.model)},
                            {"plans", nlohmann::json::array()}};
      for (const auto& c : best) out["plans"].push_back(to_json(c));
      std::cout << out.dump(1) << "\n";
    } else if (!best.empty()) {
      print_text(q, best, seconds);
    }
    if (best.empty()) {
      std::cerr << "sigma-plan: no layout of the search space fits in " << q.devices.memory_gib
                << " GiB per device\n";
      return 1;
    }
  } catch (const Error& e) {
    std::cerr << "sigma-plan: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
