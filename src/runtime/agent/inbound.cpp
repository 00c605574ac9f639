#include "runtime/agent/inbound.hpp"

#include <set>

namespace sigma::runtime::agent {

namespace {
// What workers and node agents send (runtime/protocol.hpp).
const std::set<std::string, std::less<>> kInboundTypes = {
    "hello", "heartbeat",      "joined",  "step",     "snapshot", "checkpoint", "recover",
    "done",  "storage_failed", "refused", "reformed", "node",     "launched",   "exit"};
}  // namespace

const char* Inbound::source_name(Source s) { return s == Source::worker ? "workers" : "node_agents"; }

void Inbound::message(Source from, const std::string& type) {
  ++by_source_[from].messages;
  ++by_type_[kInboundTypes.count(type) ? type : "other"];
}

void Inbound::bytes(Source from, uint64_t bytes) { by_source_[from].bytes += bytes; }

uint64_t Inbound::messages() const {
  uint64_t n = 0;
  for (const auto& [s, t] : by_source_) n += t.messages;
  return n;
}

nlohmann::json Inbound::to_json(double wall_s) const {
  uint64_t messages = 0, bytes = 0;
  nlohmann::json sources = nlohmann::json::object();
  for (const auto& [s, t] : by_source_) {
    messages += t.messages;
    bytes += t.bytes;
    sources[source_name(s)] = {{"messages", t.messages}, {"bytes", t.bytes}};
  }
  const double per = wall_s > 0 ? 1.0 / wall_s : 0.0;
  return {{"messages", messages},
          {"bytes", bytes},
          {"wall_s", wall_s},
          {"messages_per_s", static_cast<double>(messages) * per},
          {"bytes_per_s", static_cast<double>(bytes) * per},
          {"by_source", sources},
          {"by_type", by_type_}};
}

}  // namespace sigma::runtime::agent
