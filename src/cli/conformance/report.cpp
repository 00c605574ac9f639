#include "report.hpp"

#include <iomanip>

namespace sigma::conformance {

nlohmann::json results_to_json(const std::vector<Result>& results) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : results) {
    arr.push_back({{"name", r.name},
                   {"outcome", outcome_name(r.outcome)},
                   {"detail", r.detail},
                   {"seconds", r.seconds}});
  }
  return arr;
}

std::vector<Result> results_from_json(const nlohmann::json& j) {
  std::vector<Result> out;
  for (const auto& e : j) {
    Result r;
    r.name = e.at("name").get<std::string>();
    const std::string o = e.at("outcome").get<std::string>();
    r.outcome = o == "pass" ? Outcome::pass : o == "skip" ? Outcome::skip : Outcome::fail;
    r.detail = e.at("detail").get<std::string>();
    r.seconds = e.at("seconds").get<double>();
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Merged> merge(const std::map<uint32_t, std::vector<Result>>& per_rank, uint32_t world) {
  std::vector<std::string> order;
  std::map<std::string, std::map<uint32_t, const Result*>> by_name;
  for (const auto& [rank, results] : per_rank) {
    for (const auto& r : results) {
      if (by_name.find(r.name) == by_name.end()) order.push_back(r.name);
      by_name[r.name][rank] = &r;
    }
  }
  std::vector<Merged> rows;
  for (const auto& name : order) {
    const auto& ranks = by_name[name];
    Merged m{name, Outcome::pass, "", 0};
    size_t skips = 0;
    std::string missing;  // a rank without a result, said only when no rank's failure says more
    for (uint32_t r = 0; r < world; ++r) {
      auto it = ranks.find(r);
      if (it == ranks.end()) {
        if (missing.empty())
          missing = "rank " + std::to_string(r) + " has no result (its worker was stopped)";
        continue;
      }
      const Result& res = *it->second;
      m.seconds = std::max(m.seconds, res.seconds);
      if (res.outcome == Outcome::fail && m.outcome != Outcome::fail) {
        m.outcome = Outcome::fail;
        m.detail = (world > 1 ? "rank " + std::to_string(r) + ": " : std::string()) + res.detail;
      } else if (res.outcome == Outcome::skip) {
        ++skips;
        if (m.detail.empty()) m.detail = res.detail;
      }
    }
    if (!missing.empty() && m.outcome != Outcome::fail) {  // a rank ended without it: not a pass
      m.outcome = Outcome::fail;
      m.detail = missing;
    }
    if (m.outcome != Outcome::fail && skips == world) m.outcome = Outcome::skip;
    if (m.outcome == Outcome::pass && skips == 0) m.detail.clear();
    rows.push_back(std::move(m));
  }
  return rows;
}

Summary summarize(const std::vector<Merged>& rows) {
  Summary s;
  for (const auto& r : rows) {
    if (r.outcome == Outcome::pass)
      ++s.passed;
    else if (r.outcome == Outcome::fail)
      ++s.failed;
    else
      ++s.skipped;
  }
  return s;
}

void print_table(std::ostream& os, const std::vector<Merged>& rows) {
  size_t w = 5;
  for (const auto& r : rows) w = std::max(w, r.name.size());
  os << std::left << std::setw(static_cast<int>(w)) << "check"
     << "  result  seconds  detail\n";
  os << std::string(w, '-') << "  ------  -------  ------\n";
  for (const auto& r : rows) {
    std::string detail = r.detail;
    if (detail.size() > 160) detail = detail.substr(0, 157) + "...";
    os << std::left << std::setw(static_cast<int>(w)) << r.name << "  " << std::setw(6)
       << outcome_name(r.outcome) << "  " << std::right << std::setw(7) << std::fixed << std::setprecision(3)
       << r.seconds << "  " << detail << "\n";
  }
}

nlohmann::json report_json(const std::string& plugin, const std::string& path, uint32_t world,
                           const std::vector<Merged>& rows, const Summary& s) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& r : rows) {
    checks.push_back({{"name", r.name},
                      {"outcome", outcome_name(r.outcome)},
                      {"detail", r.detail},
                      {"seconds", r.seconds}});
  }
  return {{"plugin", plugin},
          {"path", path},
          {"ranks", world},
          {"abi", std::to_string(HAL_ABI_MAJOR) + "." + std::to_string(HAL_ABI_MINOR)},
          {"summary", {{"passed", s.passed}, {"failed", s.failed}, {"skipped", s.skipped}}},
          {"checks", checks}};
}

}  // namespace sigma::conformance
