// sigma-sim: runs the cluster simulator (sigma/sim.hpp) and prints a table
// per scenario; --json writes every figure, --sweep runs the failure
// model's assumed values in every combination.
//
//   sigma-sim [--scenario FILE.yaml] [--failure-model FILE.json]
//             [--accelerators N] [--days D] [--seed S] [--sweep] [--json OUT]
//             [--svg CHART.svg]
//   sigma-sim --replay JOB_DIR/incidents.jsonl
//   sigma-sim --control-plane [--accelerators N]... [--group-size G]
//             [--seconds S] [--json OUT]
//
// Exit status: 0 done, 2 bad usage or a refused scenario (the message names
// the file, line and key).
#include "chart.hpp"
#include "regular_file.hpp"

#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

// The failure model beside the program: <prefix>/share/sigma/ once
// installed, <build>/share/sigma/ in a build tree.
std::string default_model() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "data/failure-model.json";
  return (exe.parent_path().parent_path() / "share" / "sigma" / "failure-model.json").string();
}

// The journal's faults through the simulator; its decisions against the agent's.
int replay(const std::string& path) {
  try {
    std::string text, why;
    if (!sigma::files::read_regular(path, uint64_t{1} << 30, text, why))
      throw sigma::Error(sigma::Code::invalid_argument, path + ":0: (file): " + why);
    const sigma::sim::Replay r = sigma::sim::parse_journal(text, path);
    const sigma::sim::Result res = sigma::sim::run(r.scenario);
    const std::string diff = sigma::sim::compare_decisions(r.journalled, res.policies.at(0).decisions);
    std::cout << "replayed " << r.faults << " fault(s) and " << r.health_changes << " health change(s) on "
              << r.scenario.accelerators << " devices\n";
    if (!diff.empty()) {
      std::cout << "the decisions differ: " << diff << "\n";
      return 1;
    }
    size_t n = 0;
    for (const auto& d : r.journalled) n += d.action != "assign" ? 1 : 0;
    std::cout << n << " recovery decision(s), each the same as the agent's\n";
    return 0;
  } catch (const sigma::Error& e) {
    std::cerr << "sigma-sim: " << e.what() << "\n";
    return 2;
  }
}

// Each size, flat and hierarchical, one table.
int control_plane(const std::vector<uint32_t>& sizes, sigma::sim::ControlPlaneSpec spec,
                  const std::string& json) {
  try {
    std::vector<sigma::sim::ControlPlaneResult> all;
    for (uint32_t n : sizes) {
      spec.accelerators = n;
      for (auto& r : sigma::sim::control_plane(spec)) all.push_back(r);
    }
    std::cout << sigma::sim::to_table(all);
    if (!json.empty()) {
      std::ofstream out(json);
      out << sigma::sim::to_json(all);
      if (!out.flush()) throw sigma::Error(sigma::Code::unavailable, "cannot write " + json);
    }
    return 0;
  } catch (const sigma::Error& e) {
    std::cerr << "sigma-sim: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sigma-sim: a cluster of early-life accelerators under several recovery policies"};
  std::string scenario_path, model_path = default_model(), json_path;
  uint32_t accelerators = 0;
  double days = 0;
  uint64_t seed = 0;
  bool seeded = false, do_sweep = false, do_sensitivity = false;
  app.add_option("--scenario", scenario_path, "scenario file (YAML, docs/sim.md)")->check(CLI::ExistingFile);
  app.add_option("--failure-model", model_path, "public failure figures (data/failure-model.json)");
  app.add_option("--accelerators", accelerators, "overrides the scenario's cluster size")
      ->check(CLI::Range(2u, 1u << 24));
  app.add_option("--days", days, "overrides the scenario's duration")->check(CLI::Range(1e-3, 3650.0));
  app.add_option("--seed", seed, "overrides the scenario's seed")->each([&](const std::string&) {
    seeded = true;
  });
  app.add_flag("--sweep", do_sweep, "every combination of the failure model's assumed values");
  app.add_flag("--sensitivity", do_sensitivity,
               "every policy's costs x0.5, x1, x4, and each data-parallel re-form at the world's 60 s")
      ->excludes("--sweep");
  app.add_option("--json", json_path, "write every figure here");
  std::string svg_path;
  app.add_option("--svg", svg_path,
                 "draw a chart here: where time went per policy, or a sweep's utilisation");
  bool plane = false;
  std::vector<uint32_t> sizes;
  sigma::sim::ControlPlaneSpec spec;
  app.add_flag("--control-plane", plane,
               "decision latency and throughput, flat vs hierarchical scheduler (measured on this machine)");
  app.add_option("--sizes", sizes, "--control-plane: cluster sizes (default 2048 16384 131072)")
      ->check(CLI::Range(2u, 1u << 20));
  app.add_option("--group-size", spec.group_size, "--control-plane: accelerators per group controller")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--seconds", spec.seconds, "--control-plane: virtual seconds")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--report-period", spec.report_period_s, "--control-plane: heartbeat period (s)")
      ->check(CLI::Range(1e-3, 60.0));
  std::string replay_path;
  app.add_option(
         "--replay", replay_path,
         "a sigmarun incident journal: replay its faults and compare the decisions (exit 1 if they differ)")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  if (!replay_path.empty()) return replay(replay_path);
  if (plane)
    return control_plane(sizes.empty() ? std::vector<uint32_t>{2048, 16384, 131072} : sizes, spec, json_path);
  try {
    const sigma::sim::FailureModel model = sigma::sim::load_failure_model(model_path);
    sigma::sim::Scenario s;
    if (scenario_path.empty()) {
      s.failures = model;
      s.policies = sigma::sim::standard_policies();
    } else {
      s = sigma::sim::load_scenario(scenario_path, model);
    }
    if (accelerators) s.accelerators = accelerators;
    if (days > 0) s.days = days;
    if (seeded) s.seed = seed;
    if (do_sensitivity && !svg_path.empty())
      throw sigma::Error(sigma::Code::invalid_argument,
                         "--svg draws one run or a sweep; --sensitivity writes tables and --json only");
    if (do_sensitivity) {
      const auto variants = sigma::sim::sensitivity(s);
      for (const auto& v : variants)
        std::cout << "== " << v.name << "\n" << sigma::sim::to_table(v.result) << "\n";
      if (!json_path.empty()) {
        std::ofstream out(json_path);
        out << sigma::sim::to_json(variants);
        if (!out.flush()) throw sigma::Error(sigma::Code::unavailable, "cannot write " + json_path);
      }
      return 0;
    }
    std::vector<sigma::sim::Result> results;
    if (do_sweep)
      results = sigma::sim::sweep(s, {});
    else
      results.push_back(sigma::sim::run(s));
    for (const auto& r : results) std::cout << sigma::sim::to_table(r) << "\n";
    if (!svg_path.empty()) sigma_sim::write_chart(results, svg_path);
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << sigma::sim::to_json(results);
      if (!out.flush()) throw sigma::Error(sigma::Code::unavailable, "cannot write " + json_path);
    }
    return 0;
  } catch (const sigma::Error& e) {
    std::cerr << "sigma-sim: " << e.what() << "\n";
    return 2;
  }
}
