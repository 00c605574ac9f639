#include "telemetry.hpp"

#include "common.hpp"

#include <sigma/hal_support.h>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cpu_vendor {
namespace {

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<uint64_t> read_u64(const std::string& path) {
  auto s = slurp(path);
  if (!s) return std::nullopt;
  try {
    return std::stoull(*s);
  } catch (...) {
    return std::nullopt;
  }
}

std::vector<std::string> list_dir(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

hal_field_info_t info(hal_field_id_t id, hal_value_type_t type, uint32_t flags, const char* name,
                      const char* unit) {
  hal_field_info_t f{};
  f.id = id;
  f.type = type;
  f.flags = flags;
  std::snprintf(f.name, sizeof(f.name), "%s", name);
  std::snprintf(f.unit, sizeof(f.unit), "%s", unit);
  return f;
}

hal_value_t f64(double v) {
  hal_value_t x{};
  x.f64 = v;
  return x;
}
hal_value_t u64(uint64_t v) {
  hal_value_t x{};
  x.u64 = v;
  return x;
}

}  // namespace

Telemetry::Telemetry(std::string root) : root_(std::move(root)) {
  // The standard fields as the HAL's companion describes them, then ours.
  for (hal_field_id_t id :
       {HAL_FIELD_TEMPERATURE_C, HAL_FIELD_POWER_W, HAL_FIELD_ENERGY_J, HAL_FIELD_CLOCK_COMPUTE_MHZ,
        HAL_FIELD_UTILIZATION_PCT, HAL_FIELD_MEMORY_USED_BYTES, HAL_FIELD_MEMORY_TOTAL_BYTES,
        HAL_FIELD_ECC_CORRECTABLE, HAL_FIELD_ECC_UNCORRECTABLE, HAL_FIELD_LINK_ERRORS, HAL_FIELD_LINK_RETRIES,
        HAL_FIELD_THROTTLE_REASONS}) {
    hal_field_info_t f{};
    hal_standard_field(id, &f);
    fields_.push_back(f);
  }
  fields_.push_back(info(kFieldLoadAvg1m, HAL_VALUE_F64, 0, "cpu.load_avg_1m", ""));
  fields_.push_back(info(kFieldProcessRss, HAL_VALUE_U64, 0, "cpu.process_rss", "B"));
}

void Telemetry::read(const hal_field_id_t* ids, uint32_t n, hal_telemetry_sample_t* out) {
  std::lock_guard lk(mu_);
  const uint64_t now = now_ns();
  for (uint32_t i = 0; i < n; ++i) {
    hal_telemetry_sample_t& s = out[i];
    std::memset(&s, 0, sizeof(s));
    s.id = ids[i];
    auto it = std::find_if(fields_.begin(), fields_.end(), [&](const auto& f) { return f.id == ids[i]; });
    if (it == fields_.end()) {
      s.status = HAL_ERR_NOT_SUPPORTED;
      continue;
    }
    s.type = it->type;
    Reading r = read_one(ids[i], now);
    s.status = r.status;
    if (r.status == HAL_OK) {
      s.value = r.value;
      s.timestamp_ns = now;
    }
  }
}

Telemetry::Reading Telemetry::read_one(hal_field_id_t id, uint64_t now) {
  switch (id) {
    case HAL_FIELD_TEMPERATURE_C:
      return temperature();
    case HAL_FIELD_POWER_W:
      return power(now);
    case HAL_FIELD_ENERGY_J:
      return energy();
    case HAL_FIELD_CLOCK_COMPUTE_MHZ:
      return clock();
    case HAL_FIELD_UTILIZATION_PCT:
      return utilization();
    case HAL_FIELD_MEMORY_USED_BYTES:
      return meminfo("used");
    case HAL_FIELD_MEMORY_TOTAL_BYTES:
      return meminfo("MemTotal");
    case HAL_FIELD_ECC_CORRECTABLE:
      return edac("ce_count", ce_last_);
    case HAL_FIELD_ECC_UNCORRECTABLE:
      return edac("ue_count", ue_last_);
    case HAL_FIELD_LINK_ERRORS:
      return net_errors();
    case HAL_FIELD_LINK_RETRIES:
      return tcp_retransmits();
    case HAL_FIELD_THROTTLE_REASONS:
      return throttle();
    case kFieldLoadAvg1m:
      return loadavg();
    case kFieldProcessRss:
      return rss();
    default:
      return {};
  }
}

// The hottest hwmon temperature sensor, in degrees Celsius.
Telemetry::Reading Telemetry::temperature() {
  const std::string base = root_ + "/sys/class/hwmon";
  bool found = false;
  double hottest = -1e9;
  for (const auto& hw : list_dir(base, "hwmon")) {
    for (const auto& f : list_dir(base + "/" + hw, "temp")) {
      if (f.size() < 7 || f.compare(f.size() - 6, 6, "_input") != 0) continue;
      if (auto v = read_u64(base + "/" + hw + "/" + f)) {
        hottest = std::max(hottest, static_cast<double>(*v) / 1000.0);
        found = true;
      }
    }
  }
  if (!found) return {};
  return {HAL_OK, f64(hottest)};
}

// RAPL package energy, summed over packages, folded into a monotonic count
// (the hardware counter wraps at max_energy_range_uj).
Telemetry::Reading Telemetry::energy() {
  const std::string base = root_ + "/sys/class/powercap";
  uint64_t total_uj = 0, range_uj = 0;
  bool found = false;
  for (const auto& z : list_dir(base, "intel-rapl:")) {
    if (z.find(':', 11) != std::string::npos) continue;  // sub-zones are inside packages
    auto e = read_u64(base + "/" + z + "/energy_uj");
    if (!e) continue;
    total_uj += *e;
    range_uj += read_u64(base + "/" + z + "/max_energy_range_uj").value_or(0);
    found = true;
  }
  if (!found) return {};
  if (energy_seen_) {
    const uint64_t delta =
        total_uj >= energy_last_uj_ ? total_uj - energy_last_uj_ : total_uj + range_uj - energy_last_uj_;
    energy_j_ += static_cast<double>(delta) * 1e-6;
  }
  energy_last_uj_ = total_uj;
  energy_seen_ = true;
  return {HAL_OK, f64(energy_j_)};
}

// Average power since the previous reading, from the energy counter.
Telemetry::Reading Telemetry::power(uint64_t now) {
  Reading e = energy();
  if (e.status != HAL_OK) return e;
  Reading r{HAL_ERR_UNAVAILABLE, {}};
  if (power_last_j_ >= 0 && now > power_last_ns_ + 10'000'000) {
    r = {HAL_OK, f64((e.value.f64 - power_last_j_) / (static_cast<double>(now - power_last_ns_) * 1e-9))};
  }
  if (power_last_j_ < 0 || now > power_last_ns_ + 10'000'000) {
    power_last_j_ = e.value.f64;
    power_last_ns_ = now;
  }
  return r;
}

// Mean current CPU clock over all cores.
Telemetry::Reading Telemetry::clock() {
  auto text = slurp(root_ + "/proc/cpuinfo");
  if (!text) return {};
  std::istringstream in(*text);
  std::string line;
  double sum = 0;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        sum += std::atof(line.c_str() + colon + 1);
        ++n;
      }
    }
  }
  if (n == 0) return {};
  return {HAL_OK, f64(sum / n)};
}

// Busy share of all CPUs since the previous reading (since boot at first).
Telemetry::Reading Telemetry::utilization() {
  auto text = slurp(root_ + "/proc/stat");
  if (!text || text->rfind("cpu ", 0) != 0) return {};
  std::istringstream in(text->substr(4));
  uint64_t v[8] = {0};
  for (auto& x : v) in >> x;
  const uint64_t idle = v[3] + v[4];
  uint64_t total = 0;
  for (auto x : v) total += x;
  const uint64_t busy = total - idle;
  const uint64_t dt = total - cpu_total_last_, db = busy - cpu_busy_last_;
  cpu_total_last_ = total;
  cpu_busy_last_ = busy;
  if (dt == 0) return {HAL_ERR_UNAVAILABLE, {}};
  return {HAL_OK, f64(100.0 * static_cast<double>(db) / static_cast<double>(dt))};
}

Telemetry::Reading Telemetry::meminfo(const char* key) {
  auto text = slurp(root_ + "/proc/meminfo");
  if (!text) return {};
  auto kb = [&](const char* k) -> std::optional<uint64_t> {
    auto pos = text->find(std::string(k) + ":");
    if (pos == std::string::npos) return std::nullopt;
    return std::strtoull(text->c_str() + pos + std::strlen(k) + 1, nullptr, 10) * 1024;
  };
  auto total = kb("MemTotal");
  if (!total) return {};
  if (std::strcmp(key, "used") == 0) {
    auto avail = kb("MemAvailable");
    if (!avail) return {};
    return {HAL_OK, u64(*total - std::min(*total, *avail))};
  }
  return {HAL_OK, u64(*total)};
}

// EDAC corrected/uncorrected error counts over all memory controllers.
Telemetry::Reading Telemetry::edac(const char* file, uint64_t& last) {
  const std::string base = root_ + "/sys/devices/system/edac/mc";
  bool found = false;
  uint64_t sum = 0;
  for (const auto& mc : list_dir(base, "mc")) {
    if (auto v = read_u64(base + "/" + mc + "/" + file)) {
      sum += *v;
      found = true;
    }
  }
  if (!found) return {};
  last = std::max(last, sum);  // a counter reset never makes the field go back
  return {HAL_OK, u64(last)};
}

// Receive and transmit errors of every interface but loopback.
Telemetry::Reading Telemetry::net_errors() {
  auto text = slurp(root_ + "/proc/net/dev");
  if (!text) return {};
  std::istringstream in(*text);
  std::string line;
  uint64_t sum = 0;
  bool found = false;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name == "lo") continue;
    std::istringstream f(line.substr(colon + 1));
    uint64_t v[16] = {0};
    for (auto& x : v) f >> x;
    sum += v[2] + v[10];  // rx errs, tx errs
    found = true;
  }
  if (!found) return {};
  link_err_last_ = std::max(link_err_last_, sum);
  return {HAL_OK, u64(link_err_last_)};
}

// TCP segments retransmitted: the link retries that Gloo's TCP transport sees.
Telemetry::Reading Telemetry::tcp_retransmits() {
  auto text = slurp(root_ + "/proc/net/snmp");
  if (!text) return {};
  std::istringstream in(*text);
  std::string header, values;
  while (std::getline(in, header)) {
    if (header.rfind("Tcp:", 0) != 0) continue;
    if (!std::getline(in, values)) break;
    std::istringstream h(header), v(values);
    std::string name, value;
    while (h >> name && v >> value) {
      if (name == "RetransSegs") {
        retrans_last_ = std::max<uint64_t>(retrans_last_, std::stoull(value));
        return {HAL_OK, u64(retrans_last_)};
      }
    }
  }
  return {};
}

// THERMAL when any core's throttle count grew since the previous reading.
Telemetry::Reading Telemetry::throttle() {
  const std::string base = root_ + "/sys/devices/system/cpu";
  uint64_t sum = 0;
  bool found = false;
  for (const auto& cpu : list_dir(base, "cpu")) {
    if (auto v = read_u64(base + "/" + cpu + "/thermal_throttle/core_throttle_count")) {
      sum += *v;
      found = true;
    }
  }
  if (!found) return {};
  const uint64_t mask = throttle_seen_ && sum > throttle_last_ ? HAL_THROTTLE_THERMAL : 0;
  throttle_last_ = sum;
  throttle_seen_ = true;
  return {HAL_OK, u64(mask)};
}

Telemetry::Reading Telemetry::loadavg() {
  auto text = slurp(root_ + "/proc/loadavg");
  if (!text) return {};
  return {HAL_OK, f64(std::atof(text->c_str()))};
}

Telemetry::Reading Telemetry::rss() {
  auto text = slurp(root_ + "/proc/self/statm");
  if (!text) return {};
  std::istringstream in(*text);
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return {HAL_OK, u64(resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)))};
}

}  // namespace cpu_vendor
