// The cpu vendor's telemetry over a fake /sys and /proc tree (so every
// parser is exercised whatever this machine has), and over the real one.
#include <sigma/hal.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace sigma::hal {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("cpu-telemetry-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    write(root_ / "sys/class/hwmon/hwmon0/temp1_input", "45000\n");
    write(root_ / "sys/class/hwmon/hwmon1/temp3_input", "71500\n");
    write(root_ / "sys/class/hwmon/hwmon1/temp3_label", "Package id 0\n");
    write(root_ / "sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n");
    write(root_ / "sys/class/powercap/intel-rapl:0/max_energy_range_uj", "10000000\n");
    write(root_ / "sys/class/powercap/intel-rapl:0:0/energy_uj", "999\n");  // a sub-zone: not added
    write(root_ / "sys/devices/system/edac/mc/mc0/ce_count", "3\n");
    write(root_ / "sys/devices/system/edac/mc/mc0/ue_count", "0\n");
    write(root_ / "sys/devices/system/edac/mc/mc1/ce_count", "2\n");
    write(root_ / "sys/devices/system/edac/mc/mc1/ue_count", "1\n");
    write(root_ / "sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "5\n");
    write(root_ / "proc/net/dev",
          "Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo "
          "colls carrier compressed\n"
          "    lo: 100 1 9 0 0 0 0 0 100 1 9 0 0 0 0 0\n"
          "  eth0: 5000 50 4 0 0 0 0 0 7000 70 6 0 0 0 0 0\n");
    write(root_ / "proc/net/snmp", "Tcp: RtoAlgorithm RtoMin RetransSegs InErrs\nTcp: 1 200 17 0\n");
    write(root_ / "proc/meminfo",
          "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n");
    write(root_ / "proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\n");
    write(root_ / "proc/cpuinfo",
          "processor\t: 0\ncpu MHz\t\t: 2000.0\nprocessor\t: 1\ncpu MHz\t\t: 3000.0\n");
    write(root_ / "proc/loadavg", "1.25 0.5 0.1 1/100 42\n");
    write(root_ / "proc/self/statm", "100 25 0 0 0 0 0\n");
    LoadOptions lo;
    lo.options = "telemetry_root=" + root_.string();
    plugin_ = Plugin::load("cpu", lo);
  }
  void TearDown() override {
    plugin_.reset();
    fs::remove_all(root_);
  }
  hal_telemetry_sample_t read(hal_field_id_t id) { return plugin_->read_telemetry(0, {id})[0]; }

  fs::path root_;
  PluginPtr plugin_;
};

TEST_F(FakeTree, EveryStandardFieldIsParsedFromItsSource) {
  EXPECT_DOUBLE_EQ(read(HAL_FIELD_TEMPERATURE_C).value.f64, 71.5);  // the hottest sensor
  EXPECT_DOUBLE_EQ(read(HAL_FIELD_ENERGY_J).value.f64, 0.0);        // counted from the first reading
  EXPECT_DOUBLE_EQ(read(HAL_FIELD_CLOCK_COMPUTE_MHZ).value.f64, 2500.0);
  EXPECT_EQ(read(HAL_FIELD_MEMORY_TOTAL_BYTES).value.u64, 1000u * 1024);
  EXPECT_EQ(read(HAL_FIELD_MEMORY_USED_BYTES).value.u64, 600u * 1024);
  EXPECT_EQ(read(HAL_FIELD_ECC_CORRECTABLE).value.u64, 5u);
  EXPECT_EQ(read(HAL_FIELD_ECC_UNCORRECTABLE).value.u64, 1u);
  EXPECT_EQ(read(HAL_FIELD_LINK_ERRORS).value.u64, 10u);  // eth0 rx 4 + tx 6; lo ignored
  EXPECT_EQ(read(HAL_FIELD_LINK_RETRIES).value.u64, 17u);
  EXPECT_DOUBLE_EQ(read(HAL_FIELD_UTILIZATION_PCT).value.f64, 20.0);  // 200 busy of 1000
  EXPECT_DOUBLE_EQ(read(HAL_FIELD_VENDOR_FIRST + 1).value.f64, 1.25);
  EXPECT_EQ(read(HAL_FIELD_THROTTLE_REASONS).value.u64, 0u);
}

TEST_F(FakeTree, CountersStayMonotonicAcrossWrapAndReset) {
  read(HAL_FIELD_ENERGY_J);
  write(root_ / "sys/class/powercap/intel-rapl:0/energy_uj", "3000000\n");
  EXPECT_DOUBLE_EQ(read(HAL_FIELD_ENERGY_J).value.f64, 2.0);
  // The hardware counter wrapped at 10 J: 3 J -> 10 J -> 0.5 J is 7.5 J more.
  write(root_ / "sys/class/powercap/intel-rapl:0/energy_uj", "500000\n");
  EXPECT_DOUBLE_EQ(read(HAL_FIELD_ENERGY_J).value.f64, 9.5);
  // An EDAC counter reset never makes the field go back.
  EXPECT_EQ(read(HAL_FIELD_ECC_CORRECTABLE).value.u64, 5u);
  write(root_ / "sys/devices/system/edac/mc/mc0/ce_count", "0\n");
  EXPECT_EQ(read(HAL_FIELD_ECC_CORRECTABLE).value.u64, 5u);
}

TEST_F(FakeTree, ThrottleBitAppearsWhenTheThrottleCountGrows) {
  EXPECT_EQ(read(HAL_FIELD_THROTTLE_REASONS).value.u64, 0u);
  write(root_ / "sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "9\n");
  EXPECT_EQ(read(HAL_FIELD_THROTTLE_REASONS).value.u64, HAL_THROTTLE_THERMAL);
  EXPECT_EQ(read(HAL_FIELD_THROTTLE_REASONS).value.u64, 0u);
}

TEST_F(FakeTree, MissingSourcesAreNotSupportedNeverInvented) {
  fs::remove_all(root_ / "sys/class/hwmon");
  fs::remove_all(root_ / "sys/devices/system/edac");
  EXPECT_EQ(read(HAL_FIELD_TEMPERATURE_C).status, HAL_ERR_NOT_SUPPORTED);
  EXPECT_EQ(read(HAL_FIELD_ECC_CORRECTABLE).status, HAL_ERR_NOT_SUPPORTED);
  EXPECT_EQ(read(HAL_FIELD_FATAL_CODE).status, HAL_ERR_NOT_SUPPORTED);  // not listed at all
}

TEST(CpuTelemetry, ThisMachineGivesValuesOrSaysNotSupported) {
  auto p = Plugin::load("cpu");
  auto fields = p->telemetry_fields(0);
  std::vector<hal_field_id_t> ids;
  for (const auto& f : fields) ids.push_back(f.id);
  auto samples = p->read_telemetry(0, ids);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto st = samples[i].status;
    EXPECT_TRUE(st == HAL_OK || st == HAL_ERR_NOT_SUPPORTED || st == HAL_ERR_UNAVAILABLE) << fields[i].name;
  }
  // Memory and /proc fields exist on every Linux machine.
  EXPECT_EQ(p->read_telemetry(0, {HAL_FIELD_MEMORY_TOTAL_BYTES})[0].status, HAL_OK);
  if (!fs::exists("/sys/class/hwmon")) {
    EXPECT_EQ(p->read_telemetry(0, {HAL_FIELD_TEMPERATURE_C})[0].status, HAL_ERR_NOT_SUPPORTED);
  }
}

TEST(CpuOptions, AMalformedOptionStringIsRefusedWithTheKey) {
  LoadOptions lo;
  lo.options = "op_timeout_ms=soon";
  try {
    Plugin::load("cpu", lo);
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("op_timeout_ms='soon'"), std::string::npos) << e.what();
  }
  lo.options = "colour=blue";
  EXPECT_THROW(Plugin::load("cpu", lo), Error);
}

}  // namespace
}  // namespace sigma::hal
