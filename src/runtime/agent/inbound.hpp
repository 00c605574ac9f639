// The root agent's inbound load: every message it reads, by who sent it (a
// worker over its own connection, or another host's agent) and by its
// type, and the bytes read, over the job's wall time. What the
// hierarchical control plane is measured against (docs/sigmarun.md), and
// what `sigma-sim --control-plane` models. Pure: the host counts, this adds
// up. Thread-safety: one thread at a time.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace sigma::runtime::agent {

class Inbound {
 public:
  enum class Source { worker, node_agent };

  // One message of type `type` (its "type" field): one a worker or a node
  // agent sends, or else "other" (a peer's words never grow the tally).
  void message(Source from, const std::string& type);
  // `bytes` more read off connections from `from`.
  void bytes(Source from, uint64_t bytes);

  struct Tally {
    uint64_t messages = 0, bytes = 0;
  };
  static const char* source_name(Source s);  // "workers", "node_agents"
  uint64_t messages() const;
  const std::map<Source, Tally>& by_source() const { return by_source_; }
  const std::map<std::string, uint64_t>& by_type() const { return by_type_; }
  // {"messages", "bytes", "messages_per_s", "bytes_per_s", "wall_s",
  //  "by_source": {"workers"|"node_agents": {"messages", "bytes"}},
  //  "by_type": {TYPE: messages}}; rates over `wall_s` (0 when it is not
  // positive).
  nlohmann::json to_json(double wall_s) const;

 private:
  std::map<Source, Tally> by_source_;
  std::map<std::string, uint64_t> by_type_;
};

}  // namespace sigma::runtime::agent
