// Shared by the two-process benchmarks: the program starts its own peer
// (rank 1) and both ranks run the same benchmarks with fixed iteration
// counts; rank 0 reports through a Recorder that keeps every result (the
// median when repetitions are asked for) for a ratio table.
#pragma once

#include <benchmark/benchmark.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace sigma::bench {

// In rank 0 (started by a user): makes a scratch folder, starts rank 1 as
// "PROGRAM --peer 1 DIR ARGS..." and returns 0. In rank 1: strips the three
// leading arguments and returns 1. `dir` is the folder both ranks meet in.
inline int start_two_ranks(int& argc, char**& argv, std::string& dir) {
  if (argc >= 4 && std::string(argv[1]) == "--peer") {
    dir = argv[3];
    argv[3] = argv[0];
    argv += 3;
    argc -= 3;
    return 1;
  }
  char tmpl[] = "/tmp/sigma-bench-XXXXXX";
  dir = ::mkdtemp(tmpl);
  std::vector<std::string> args = {"/proc/self/exe", "--peer", "1", dir};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid;
  if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargs.data(), environ) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
  return 0;
}

// Keeps every run's result for the ratio table; prints like the console.
class Recorder : public benchmark::ConsoleReporter {
 public:
  struct Row {
    double seconds_per_op = 0;
    double busbw = 0;
  };
  std::map<std::string, Row> rows;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      // With --benchmark_repetitions, keep the median.
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      Row row;
      row.seconds_per_op = r.GetAdjustedRealTime() * 1e-9;  // default unit: ns
      auto it = r.counters.find("busbw_GBps");
      if (it != r.counters.end()) row.busbw = it->second.value;
      std::string name = r.benchmark_name();
      if (r.run_type == Run::RT_Aggregate) name = name.substr(0, name.size() - std::string("_median").size());
      rows[name] = row;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// Keeps each benchmark's median seconds (manual time in milliseconds),
// and its counters as "NAME:COUNTER", for the ratio lines; prints like
// the console.
class MedianSeconds : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> s;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      std::string name = r.benchmark_name();
      name = name.substr(0, name.find("/iterations"));
      s[name] = r.GetAdjustedRealTime() * 1e-3;  // ms -> s
      for (const auto& [counter, c] : r.counters) s[name + ":" + counter] = c.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// Two paths measured in alternating blocks of `ops` operations: A then B,
// then B then A, and so on, `blocks` times. On two vCPUs shared by both
// ranks a run of one path after the other drifts by more than the
// difference sought; interleaving cancels the drift, and alternating which
// goes first cancels what one leaves the other (caches, socket buffers).
// Seconds per operation of the median and of the best block of each.
struct Interleaved {
  double a_median = 0, b_median = 0, a_best = 0, b_best = 0;
};

template <typename A, typename B>
Interleaved interleave(int blocks, int ops, A&& a, B&& b) {
  std::vector<double> ta, tb;
  auto block = [&](auto& f, std::vector<double>& out) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < ops; ++i) f();
    out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / ops);
  };
  for (int blk = 0; blk < blocks; ++blk) {
    if (blk % 2 == 0) {
      block(a, ta);
      block(b, tb);
    } else {
      block(b, tb);
      block(a, ta);
    }
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2], ta.front(), tb.front()};
}

}  // namespace sigma::bench
