// The incident journal: JSON lines, flushed per line so a crash of the agent
// loses nothing written, each also handed to the host's observer.
#pragma once

#include <sigma/agent.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace sigma::runtime::agent {

class Journal {
 public:
  // Appends to `path`; "t" counts from `t0` (health::monotonic_s()).
  Journal(const std::string& path, double t0, AgentObserver observer = {});
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  // Adds "t" (seconds since the agent started) and writes one line.
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_;
  double t0_;
  AgentObserver observer_;
};

// Writes `j` to `path` through a temporary file and a rename.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace sigma::runtime::agent
