// Telemetry from what Linux offers: hwmon, RAPL, EDAC, /proc. A field the
// machine lacks reads HAL_ERR_NOT_SUPPORTED; no number is ever invented.
#pragma once

#include <sigma/hal.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cpu_vendor {

enum : uint32_t {
  kFieldLoadAvg1m = HAL_FIELD_VENDOR_FIRST + 1,   // f64, /proc/loadavg
  kFieldProcessRss = HAL_FIELD_VENDOR_FIRST + 2,  // u64 bytes, /proc/self/statm
};

// Thread-safety: every method may be called from any thread, concurrently.
class Telemetry {
 public:
  // `root` prefixes every path read ("" = the real /sys and /proc), so tests
  // can point it at a fake tree.
  explicit Telemetry(std::string root = "");
  const std::vector<hal_field_info_t>& fields() const { return fields_; }
  void read(const hal_field_id_t* ids, uint32_t n, hal_telemetry_sample_t* out);

 private:
  // One reading: the value, or the status saying why there is none.
  struct Reading {
    hal_status_t status = HAL_ERR_NOT_SUPPORTED;
    hal_value_t value{};
  };
  Reading read_one(hal_field_id_t id, uint64_t now);
  Reading temperature();
  Reading energy();
  Reading power(uint64_t now);
  Reading clock();
  Reading utilization();
  Reading meminfo(const char* key);
  Reading edac(const char* file, uint64_t& last);
  Reading net_errors();
  Reading tcp_retransmits();
  Reading throttle();
  Reading loadavg();
  Reading rss();

  std::string root_;
  std::vector<hal_field_info_t> fields_;
  std::mutex mu_;  // guards everything below
  // Monotonic accumulators: counters that wrap or reset are folded into these.
  double energy_j_ = 0;
  uint64_t energy_last_uj_ = 0;
  bool energy_seen_ = false;
  double power_last_j_ = -1;
  uint64_t power_last_ns_ = 0;
  uint64_t cpu_busy_last_ = 0, cpu_total_last_ = 0;
  uint64_t ce_last_ = 0, ue_last_ = 0, link_err_last_ = 0, retrans_last_ = 0;
  uint64_t throttle_last_ = 0;
  bool throttle_seen_ = false;
};

}  // namespace cpu_vendor
