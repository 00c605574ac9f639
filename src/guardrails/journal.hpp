// The guardrails' journal: one JSON object per line, flushed per line, so a
// process killed mid-run leaves every decision it made readable.
#pragma once

#include <sigma/guardrails.hpp>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace sigma::guardrails::detail {

class Journal {
 public:
  // Opens (appends to) the configured path on the ranks that write; throws
  // Error(unavailable) naming the path when it cannot be opened.
  Journal(const JournalConfig& c, int rank);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  using Changes = std::vector<std::pair<std::string, std::string>>;  // (layer, why)
  void decision(const Decision& d, const Changes& escalated, const Changes& deescalated, double scan_ms,
                double exchange_ms);
  void fingerprint(const FingerprintResult& r);
  void attribution(uint64_t step, const std::string& device, uint64_t rerun, const std::vector<int>& faulty);

 private:
  void write(const std::string& line);
  std::FILE* f_ = nullptr;
};

}  // namespace sigma::guardrails::detail
