// sigma-hal-conformance: checks a HAL plugin against ABI 1.0.
//
//   sigma-hal-conformance --plugin NAME|PATH [--ranks N] [--json FILE]
//
// With --ranks N > 1 it starts N real processes (itself, as workers) that
// meet through a file store and run the same checks; the parent merges their
// results. Exit status: 0 all run checks passed, 1 a check failed, 2 bad
// usage, 77 nothing could run because the plugin found no device.
#include "report.hpp"
#include "suite.hpp"

#include <CLI/CLI.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

extern char** environ;

namespace sc = sigma::conformance;

namespace {

std::string make_temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sigma-conformance-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
  }
  return tmpl;
}

std::string plugin_path_or_spec(const std::string& spec) {
  try {
    return sigma::hal::resolve_plugin(spec);
  } catch (const std::exception&) {
    return spec;
  }
}

// Starts one worker process per rank and collects their result files. A rank
// that dies or runs past the deadline leaves no file; merge() fails its rows.
std::map<uint32_t, std::vector<sc::Result>> run_ranks(const sc::Options& base, uint32_t world,
                                                      const std::string& dir, int timeout_s,
                                                      std::vector<sc::Merged>& extra) {
  std::vector<pid_t> pids(world, -1);
  for (uint32_t r = 0; r < world; ++r) {
    std::vector<std::string> args = {"/proc/self/exe",
                                     "--plugin",
                                     base.plugin,
                                     "--ranks",
                                     std::to_string(world),
                                     "--worker-rank",
                                     std::to_string(r),
                                     "--store",
                                     base.store_uri,
                                     "--result",
                                     dir + "/rank-" + std::to_string(r) + ".json",
                                     "--large-count",
                                     std::to_string(base.large_count),
                                     "--op-timeout-ms",
                                     std::to_string(base.op_timeout.count())};
    if (!base.plugin_options.empty()) {
      args.push_back("--options");
      args.push_back(base.plugin_options);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
      extra.push_back({"process.rank" + std::to_string(r), sc::Outcome::fail,
                       "cannot start: " + std::string(std::strerror(errno)), 0});
      continue;
    }
    pids[r] = pid;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  size_t running = 0;
  for (pid_t p : pids) running += p > 0;
  std::vector<int> status(world, 0);
  while (running > 0) {
    for (uint32_t r = 0; r < world; ++r) {
      if (pids[r] <= 0) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        pids[r] = 0;
        --running;
        if (WIFSIGNALED(st)) {
          extra.push_back({"process.rank" + std::to_string(r), sc::Outcome::fail,
                           std::string("killed by signal ") + ::strsignal(WTERMSIG(st)), 0});
        }
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (uint32_t r = 0; r < world; ++r) {
        if (pids[r] > 0) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], nullptr, 0);
          extra.push_back({"process.rank" + std::to_string(r), sc::Outcome::fail,
                           "still running after " + std::to_string(timeout_s) + " s: killed", 0});
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::map<uint32_t, std::vector<sc::Result>> per_rank;
  for (uint32_t r = 0; r < world; ++r) {
    std::ifstream in(dir + "/rank-" + std::to_string(r) + ".json");
    if (!in) continue;
    try {
      per_rank[r] = sc::results_from_json(nlohmann::json::parse(in));
    } catch (const std::exception& e) {
      extra.push_back({"process.rank" + std::to_string(r), sc::Outcome::fail,
                       std::string("unreadable result file: ") + e.what(), 0});
    }
  }
  return per_rank;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Checks a libsigma HAL plugin against the HAL ABI 1 contract (1.0 and 1.1)"};
  sc::Options opts;
  uint32_t ranks = 1;
  int worker_rank = -1;
  int timeout_s = 900;
  int64_t op_timeout_ms = 60000;
  std::string json_path, result_path, store_uri;
  bool quiet = false;
  app.add_option("--plugin", opts.plugin, "plugin short name (cpu, skeleton, ...) or path to its .so")
      ->required();
  app.add_option("--ranks", ranks, "number of processes (ranks) to start")->check(CLI::Range(1u, 64u));
  app.add_option("--json", json_path, "write the JSON report here");
  app.add_option("--options", opts.plugin_options, "the plugin's init options string");
  app.add_option("--large-count", opts.large_count, "element count of the large collective cases");
  app.add_option("--timeout-s", timeout_s, "kill the ranks after this many seconds");
  app.add_option("--op-timeout-ms", op_timeout_ms, "a collective slower than this fails");
  app.add_option("--store", store_uri,
                 "where the ranks meet: redis://host:port[/prefix] (a unique run key is appended) "
                 "or file:///dir; default: a file store in a temporary folder");
  app.add_flag("--quiet", quiet, "print only the summary line");
  // Worker mode, used by the parent process only.
  app.add_option("--worker-rank", worker_rank)->group("");
  app.add_option("--result", result_path)->group("");
  CLI11_PARSE(app, argc, argv);
  opts.op_timeout = std::chrono::milliseconds(op_timeout_ms);

  try {
    if (worker_rank >= 0) {
      opts.rank = static_cast<uint32_t>(worker_rank);
      opts.world = ranks;
      opts.store_uri = store_uri;
      sc::Context ctx(opts);
      sc::run_suite(ctx);
      std::ofstream out(result_path + ".tmp");
      out << sc::results_to_json(ctx.results()).dump();
      out.close();
      std::filesystem::rename(result_path + ".tmp", result_path);
      return 0;
    }

    const std::string dir = make_temp_dir();
    if (store_uri.empty()) {
      opts.store_uri = "file://" + dir + "/store";
    } else {
      // Keys outlive a run in Redis: each run gets its own namespace.
      const std::string run = "conformance-" + std::to_string(::getpid()) + "-" +
                              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
      std::string base_uri = store_uri;
      while (!base_uri.empty() && base_uri.back() == '/') base_uri.pop_back();
      opts.store_uri = base_uri + "/" + run;
    }
    std::vector<sc::Merged> extra;
    std::map<uint32_t, std::vector<sc::Result>> per_rank;
    if (ranks == 1) {
      sc::Context ctx(opts);
      sc::run_suite(ctx);
      per_rank[0] = ctx.results();
    } else {
      per_rank = run_ranks(opts, ranks, dir, timeout_s, extra);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);

    std::vector<sc::Merged> rows = sc::merge(per_rank, ranks);
    rows.insert(rows.end(), extra.begin(), extra.end());
    const sc::Summary s = sc::summarize(rows);
    const std::string path = plugin_path_or_spec(opts.plugin);
    if (quiet) {
      // Quiet still names what failed.
      std::vector<sc::Merged> failed;
      for (const auto& r : rows)
        if (r.outcome == sc::Outcome::fail) failed.push_back(r);
      if (!failed.empty()) sc::print_table(std::cout, failed);
    } else {
      std::cout << "HAL conformance: plugin " << opts.plugin << " (" << path << "), " << ranks
                << (ranks == 1 ? " rank" : " ranks") << ", ABI " << HAL_ABI_MAJOR << "." << HAL_ABI_MINOR
                << "\n\n";
      sc::print_table(std::cout, rows);
      std::cout << "\n";
    }
    const bool no_device =
        !rows.empty() && rows.front().name == "load" && rows.front().outcome == sc::Outcome::skip;
    std::cout << "conformance " << opts.plugin << " x" << ranks << ": " << s.passed << " passed, " << s.failed
              << " failed, " << s.skipped << " skipped"
              << (no_device ? " (" + rows.front().detail + ")" : std::string()) << "\n";
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << sc::report_json(opts.plugin, path, ranks, rows, s).dump(2) << "\n";
      if (!out) {
        std::cerr << "sigma-hal-conformance: cannot write " << json_path << "\n";
        return 2;
      }
    }
    if (s.failed > 0) return 1;
    return no_device ? 77 : 0;
  } catch (const std::exception& e) {
    std::cerr << "sigma-hal-conformance: " << e.what() << "\n";
    return 2;
  }
}
