#include "runtime/agent/metrics.hpp"

#include <sigma/error.hpp>

#include <httplib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

namespace sigma::runtime::agent {

namespace {

// One metric family: HELP, TYPE, then its samples.
void family(std::ostringstream& o, const char* name, const char* type, const char* help) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

void sample(std::ostringstream& o, const std::string& name, const std::string& labels, double v) {
  o << name;
  if (!labels.empty()) o << "{" << labels << "}";
  o << " " << v << "\n";
}

// Per-device telemetry under the names of NVIDIA's DCGM exporter where one
// exists, so that dashboards built for it read these. DCGM's *_TOTAL
// counters are exposed as gauges: Prometheus wants a counter's name to end
// in a lower-case "_total", and renaming them would break those dashboards.
struct Dcgm {
  hal_field_id_t field;
  const char* name;
  const char* help;
  double scale;  // DCGM's unit per HAL unit
};
constexpr Dcgm kDcgm[] = {
    {HAL_FIELD_TEMPERATURE_C, "DCGM_FI_DEV_GPU_TEMP", "Device temperature (in C).", 1},
    {HAL_FIELD_POWER_W, "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", 1},
    {HAL_FIELD_ENERGY_J, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
     "Total energy consumption since the plugin loaded (in mJ; monotonic).", 1000},
    {HAL_FIELD_CLOCK_COMPUTE_MHZ, "DCGM_FI_DEV_SM_CLOCK", "Compute clock frequency (in MHz).", 1},
    {HAL_FIELD_CLOCK_MEMORY_MHZ, "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", 1},
    {HAL_FIELD_UTILIZATION_PCT, "DCGM_FI_DEV_GPU_UTIL", "Device utilization (in %).", 1},
    {HAL_FIELD_MEMORY_USED_BYTES, "DCGM_FI_DEV_FB_USED", "Device memory used (in MiB).", 1.0 / (1 << 20)},
    {HAL_FIELD_ECC_CORRECTABLE, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Correctable ECC errors (monotonic).", 1},
    {HAL_FIELD_ECC_UNCORRECTABLE, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Uncorrectable ECC errors (monotonic).",
     1},
    {HAL_FIELD_LINK_ERRORS, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
     "Link errors over all links (monotonic).", 1},
    {HAL_FIELD_LINK_RETRIES, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
     "Link retries over all links (monotonic).", 1},
    {HAL_FIELD_THROTTLE_REASONS, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
     "Throttle reasons (HAL_THROTTLE_* bits).", 1},
    {HAL_FIELD_FATAL_CODE, "DCGM_FI_DEV_XID_ERRORS", "The last fatal (XID-like) error code; 0 none.", 1},
};

// The value of a field the device reported, or false.
bool value_of(const std::vector<hal_telemetry_sample_t>& t, hal_field_id_t id, double& v) {
  for (const auto& x : t) {
    if (x.id != id || x.status != HAL_OK) continue;
    v = x.type == HAL_VALUE_F64   ? x.value.f64
        : x.type == HAL_VALUE_I64 ? static_cast<double>(x.value.i64)
                                  : static_cast<double>(x.value.u64);
    return std::isfinite(v);
  }
  return false;
}

void render_devices(std::ostringstream& o, const MetricsSnapshot& s) {
  family(o, "sigma_device_health_score", "gauge", "1 healthy .. 0 failed.");
  for (const auto& d : s.devices)
    sample(o, "sigma_device_health_score", "device=\"" + std::to_string(d.device) + "\"", d.score);
  // Enumerations as state sets: one series per state, 1 for the current
  // one, so a change moves a value instead of starting a series.
  family(o, "sigma_device_health_state", "gauge",
         "The health monitor's state of the device (1 for the current one).");
  for (const auto& d : s.devices)
    for (auto st :
         {health::State::healthy, health::State::suspect, health::State::failing, health::State::failed})
      sample(o, "sigma_device_health_state",
             "device=\"" + std::to_string(d.device) + "\",state=\"" + health::state_name(st) + "\"",
             d.health == st ? 1 : 0);
  family(o, "sigma_device_lifecycle_state", "gauge",
         "The scheduler's lifecycle state of the device (1 for the current one).");
  using scheduler::DeviceState;
  for (const auto& d : s.devices)
    for (auto st : {DeviceState::fresh, DeviceState::validating, DeviceState::available, DeviceState::in_use,
                    DeviceState::suspect, DeviceState::cordoned, DeviceState::repaired})
      sample(o, "sigma_device_lifecycle_state",
             "device=\"" + std::to_string(d.device) + "\",state=\"" + scheduler::state_name(st) + "\"",
             d.state == st ? 1 : 0);
  for (const Dcgm& m : kDcgm) {
    bool any = false;
    for (const auto& d : s.devices) {
      double v = 0;
      if (!value_of(d.telemetry, m.field, v)) continue;
      if (!any) family(o, m.name, "gauge", m.help);
      any = true;
      sample(o, m.name, "gpu=\"" + std::to_string(d.device) + "\"", v * m.scale);
    }
  }
  bool any = false;
  for (const auto& d : s.devices) {
    double v = 0;
    if (!value_of(d.telemetry, HAL_FIELD_RETIRED_PAGES, v)) continue;
    if (!any) family(o, "sigma_device_retired_pages_total", "counter", "Memory pages the device retired.");
    any = true;
    sample(o, "sigma_device_retired_pages_total", "gpu=\"" + std::to_string(d.device) + "\"", v);
  }
}

// What the agent read: by source, and by message type (types a peer
// sends, or "other": label values never come from a peer's words).
void render_inbound(std::ostringstream& o, const Inbound& in) {
  family(o, "sigma_agent_inbound_messages_total", "counter", "Messages this agent read, by sender.");
  for (const auto& [src, t] : in.by_source())
    sample(o, "sigma_agent_inbound_messages_total",
           std::string("source=\"") + Inbound::source_name(src) + "\"", static_cast<double>(t.messages));
  family(o, "sigma_agent_inbound_bytes_total", "counter",
         "Bytes this agent read off its connections, by sender.");
  for (const auto& [src, t] : in.by_source())
    sample(o, "sigma_agent_inbound_bytes_total", std::string("source=\"") + Inbound::source_name(src) + "\"",
           static_cast<double>(t.bytes));
  family(o, "sigma_agent_inbound_messages_by_type_total", "counter", "Messages this agent read, by type.");
  for (const auto& [type, n] : in.by_type())
    sample(o, "sigma_agent_inbound_messages_by_type_total", "type=\"" + type + "\"", static_cast<double>(n));
}

}  // namespace

std::string render_metrics(const MetricsSnapshot& s) {
  std::ostringstream o;
  o.precision(15);
  family(o, "sigma_steps_total", "counter", "Steps the job has reached.");
  sample(o, "sigma_steps_total", "", static_cast<double>(s.steps));
  family(o, "sigma_tokens_total", "counter", "Tokens rank 0 reported trained on, recomputed steps again.");
  sample(o, "sigma_tokens_total", "", static_cast<double>(s.tokens));
  family(o, "sigma_step_rate", "gauge", "Steps per second since the start.");
  sample(o, "sigma_step_rate", "", s.wall_s > 0 ? static_cast<double>(s.steps) / s.wall_s : 0.0);
  family(o, "sigma_incidents_total", "counter", "Faults and migrations handled.");
  sample(o, "sigma_incidents_total", "", static_cast<double>(s.incidents));
  family(o, "sigma_spares_available", "gauge", "Validated devices waiting as spares.");
  sample(o, "sigma_spares_available", "", static_cast<double>(s.spares));
  render_devices(o, s);
  render_inbound(o, s.inbound);
  const nlohmann::json l = s.ledger.to_json(s.wall_s);
  family(o, "sigma_goodput_lost_seconds_total", "counter", "Wall time lost, by cause.");
  for (auto& [cause, v] : l["lost_s"].items())
    sample(o, "sigma_goodput_lost_seconds_total", "cause=\"" + cause + "\"", v.get<double>());
  family(o, "sigma_goodput", "gauge", "Fraction of wall time not lost.");
  sample(o, "sigma_goodput", "", l["goodput"].get<double>());
  return o.str();
}

MetricsServer::MetricsServer(int port) : server_(std::make_unique<httplib::Server>()) {
  server_->set_read_timeout(1, 0);
  server_->set_write_timeout(1, 0);
  server_->set_keep_alive_max_count(1);
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    res.set_content(body_, "text/plain; version=0.0.4");
  });
  server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) res.set_content("only /metrics is served here\n", "text/plain");
  });
  port_ = port == 0 ? server_->bind_to_any_port("127.0.0.1")
                    : (server_->bind_to_port("127.0.0.1", port) ? port : -1);
  if (port_ <= 0)
    throw Error(Code::unavailable, "agent: cannot serve metrics on 127.0.0.1:" + std::to_string(port) + ": " +
                                       std::strerror(errno));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void MetricsServer::publish(const MetricsSnapshot& s) {
  std::string body = render_metrics(s);
  std::lock_guard<std::mutex> lk(mu_);
  body_ = std::move(body);
}

}  // namespace sigma::runtime::agent
