#include "journal.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace sigma::guardrails::detail {
namespace {

using nlohmann::json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json changes(const Journal::Changes& c) {
  json a = json::array();
  for (const auto& [layer, why] : c) a.push_back({{"layer", layer}, {"why", why}});
  return a;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// JSON has no NaN/Inf: such figures are written as strings.
json number(double v) { return std::isfinite(v) ? json(v) : json(std::to_string(v)); }

}  // namespace

Journal::Journal(const JournalConfig& c, int rank) {
  if (c.path.empty() || (!c.all_ranks && rank != 0)) return;
  const std::string path = c.all_ranks ? c.path + ".rank" + std::to_string(rank) : c.path;
  f_ = std::fopen(path.c_str(), "a");
  if (f_ == nullptr)
    throw Error(Code::unavailable,
                "guardrails: cannot open the journal " + path + ": " + std::strerror(errno));
}

Journal::~Journal() {
  if (f_) std::fclose(f_);
}

void Journal::write(const std::string& line) {
  if (f_ == nullptr) return;
  std::fputs(line.c_str(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
}

void Journal::decision(const Decision& d, const Changes& escalated, const Changes& deescalated,
                       double scan_ms, double exchange_ms) {
  if (f_ == nullptr) return;
  json j = {{"t", now_s()},
            {"event", "step"},
            {"step", d.step},
            {"action", action_name(d.action)},
            {"reason", d.reason},
            {"loss", number(d.loss)},
            {"global_norm", number(d.global_norm)},
            {"clip_factor", d.clip_factor},
            {"loss_scale", d.loss_scale},
            {"next_loss_scale", d.next_loss_scale},
            {"non_finite", d.non_finite},
            {"non_finite_ranks", d.non_finite_ranks},
            {"mismatch_ranks", d.mismatch_ranks},
            {"check_fingerprint", d.check_fingerprint},
            {"scan_ms", scan_ms},
            {"exchange_ms", exchange_ms}};
  if (d.action == Action::rollback) {
    j["rollback_to_step"] = d.rollback_to_step;
    j["skip_data"] = {d.skip_data_begin, d.skip_data_end};
  }
  if (!escalated.empty()) j["escalate"] = changes(escalated);
  if (!deescalated.empty()) j["deescalate"] = changes(deescalated);
  write(j.dump());
}

void Journal::fingerprint(const FingerprintResult& r) {
  if (f_ == nullptr) return;
  json fps = json::array();
  for (uint64_t f : r.fingerprints) fps.push_back(hex(f));
  write(json{{"t", now_s()},
             {"event", "fingerprint"},
             {"step", r.step},
             {"match", r.match},
             {"fingerprints", fps},
             {"odd_ranks", r.odd_ranks},
             {"rerun_needed", r.rerun_needed},
             {"reason", r.reason}}
            .dump());
}

void Journal::attribution(uint64_t step, const std::string& device, uint64_t rerun,
                          const std::vector<int>& faulty) {
  if (f_ == nullptr) return;
  write(json{{"t", now_s()},
             {"event", "sdc_attribution"},
             {"step", step},
             {"rerun_device", device},
             {"rerun_fingerprint", hex(rerun)},
             {"faulty_ranks", faulty},
             {"reason", faulty.empty() ? "the re-run matches no replica: not attributed to a device"
                                       : "the replicas that disagree with the re-run are at fault"}}
            .dump());
}

}  // namespace sigma::guardrails::detail
