// Merging the ranks' results, the readable table and the JSON report.
#pragma once

#include "suite.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <ostream>

namespace sigma::conformance {

struct Merged {
  std::string name;
  Outcome outcome;
  std::string detail;
  double seconds;  // slowest rank
};

struct Summary {
  size_t passed = 0, failed = 0, skipped = 0;
};

nlohmann::json results_to_json(const std::vector<Result>& results);
std::vector<Result> results_from_json(const nlohmann::json& j);

// One row per check, in first-seen order. A check fails when any rank failed
// it (that rank's reason is given) or any rank has no result for it (its
// worker was stopped); it is skipped only when every rank skipped it.
std::vector<Merged> merge(const std::map<uint32_t, std::vector<Result>>& per_rank, uint32_t world);

Summary summarize(const std::vector<Merged>& rows);
void print_table(std::ostream& os, const std::vector<Merged>& rows);
nlohmann::json report_json(const std::string& plugin, const std::string& path, uint32_t world,
                           const std::vector<Merged>& rows, const Summary& s);

}  // namespace sigma::conformance
