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

#include "regular_file.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace sigma;

namespace {

void print_text(const planner::Request& q, const std::vector<planner::Candidate>& best, double seconds) {
  std::printf("%s on %u devices: %zu best of the layouts that fit (searched in %.3f s)\n\n",
              q.model.name.empty() ? "model" : q.model.name.c_str(), q.devices.count, best.size(), seconds);
  std::printf("%-58s %9s %12s %6s %8s %7s %7s\n", "layout", "step s", "tokens/s", "MFU", "mem GiB", "spares",
              "max e/r");
  for (const auto& c : best)
    std::printf("%-58s %9.3f %12.0f %5.1f%% %8.1f %7u %7u\n", planner::describe(c.layout).c_str(),
                c.score.step_s, c.score.tokens_per_s, 100 * c.score.mfu, c.score.memory_gib,
                q.devices.count - c.devices, c.max_experts_per_rank);
  std::printf(
      "(spares: devices held out of the layout; max e/r: experts a rank can hold within its memory,\n"
      " the autotuner's max_experts_per_rank)\n");
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
    std::string text, why;
    if (!sigma::files::read_regular(file, uint64_t{1} << 20, text, why))
      throw Error(Code::invalid_argument, file + ":0: (file): " + why);
    planner::Request q = planner::parse_request(text, file);
    if (top) q.top = top;
    if (devices) q.devices.count = devices;
    const auto t0 = std::chrono::steady_clock::now();
    const auto best = planner::search(q.model, q.devices, q.space, q.framework, q.efficiency, q.top);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (json) {
      std::cout << planner::plans_json(q, best, seconds) << "\n";
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
