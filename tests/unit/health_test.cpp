// The health monitor: each detector on synthetic observations with known
// figures, warnings clearing after a calm window, and the sampler reading the
// sim vendor's thermal_runaway scenario through the real ABI, warning before
// the device is lost.
#include <sigma/health.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <chrono>
#include <thread>

namespace sigma::health {
namespace {

hal_telemetry_sample_t sample(hal_field_id_t id, hal_value_type_t type, hal_value_t value) {
  hal_telemetry_sample_t s{};
  s.id = id;
  s.status = HAL_OK;
  s.type = type;
  s.value = value;
  return s;
}

hal_telemetry_sample_t f64(hal_field_id_t id, double v) { return sample(id, HAL_VALUE_F64, {.f64 = v}); }
hal_telemetry_sample_t u64(hal_field_id_t id, uint64_t v) { return sample(id, HAL_VALUE_U64, {.u64 = v}); }

const Warning* find(const DeviceHealth& h, const std::string& rule) {
  for (const Warning& w : h.warnings) {
    if (w.rule == rule) return &w;
  }
  return nullptr;
}

TEST(Health, ATimeScaledConfigJudgesTrendsOnTheDevicesClock) {
  const Config c;
  const Config s = time_scaled(c, 20);
  EXPECT_DOUBLE_EQ(s.trend_window_s, 1.0);  // 20 s of device time
  EXPECT_DOUBLE_EQ(s.trend_horizon_s, 15.0);
  EXPECT_DOUBLE_EQ(s.trend_min_slope_c_per_s, 0.4);
  EXPECT_DOUBLE_EQ(s.ecc_window_s, 1.5);
  EXPECT_DOUBLE_EQ(s.ecc_per_min_suspect, 600.0);
  EXPECT_DOUBLE_EQ(s.link_window_s, 1.5);
  EXPECT_DOUBLE_EQ(s.link_errors_per_min_suspect, 1200.0);
  EXPECT_DOUBLE_EQ(s.clear_after_s, 1.5);
  // Wall-clock figures stay as they are.
  EXPECT_DOUBLE_EQ(s.heartbeat_timeout_s, c.heartbeat_timeout_s);
  EXPECT_DOUBLE_EQ(s.straggler_ratio, c.straggler_ratio);
  // Windows keep a floor of a few heartbeats.
  const Config fast = time_scaled(c, 1000);
  EXPECT_DOUBLE_EQ(fast.trend_window_s, 0.5);
  EXPECT_DOUBLE_EQ(fast.ecc_window_s, 1.0);
  EXPECT_NO_THROW(validate(fast));
  EXPECT_DOUBLE_EQ(time_scaled(c, 1).trend_window_s, c.trend_window_s);
  for (double bad : {0.0, -2.0, std::nan(""), std::numeric_limits<double>::infinity()})
    EXPECT_THROW(time_scaled(c, bad), Error) << bad;
}

TEST(Health, ASteadyDeviceStaysHealthyWithScoreOne) {
  Monitor m;
  m.add_device(0);
  for (int i = 0; i < 100; ++i) {
    auto s = f64(HAL_FIELD_TEMPERATURE_C, 60 + (i % 2) * 0.5);
    m.observe_telemetry(0, i * 0.1, &s, 1);
    EXPECT_TRUE(m.evaluate(i * 0.1).empty());
  }
  EXPECT_EQ(m.device(0).state, State::healthy);
  EXPECT_DOUBLE_EQ(m.device(0).score, 1.0);
}

TEST(Health, ARisingTemperatureIsPredictedBeforeItCrossesAndSaysWhen) {
  Config c;
  c.trend_window_s = 10;
  Monitor m(c);
  // 70 C rising 0.1 C/s: crosses 95 C in about 250 s (< 300 s horizon).
  double first_warning = -1;
  for (int i = 0; i <= 100; ++i) {
    const double t = i * 0.2;
    auto s = f64(HAL_FIELD_TEMPERATURE_C, 70 + 0.1 * t);
    m.observe_telemetry(0, t, &s, 1);
    for (const Event& e : m.evaluate(t)) {
      if (e.kind == Event::Kind::state_changed && e.to == State::suspect && first_warning < 0) {
        first_warning = t;
        EXPECT_EQ(e.warning.rule, "trend");
      }
    }
  }
  ASSERT_GE(first_warning, 0);
  const DeviceHealth h = m.device(0);
  const Warning* w = find(h, "trend");
  ASSERT_NE(w, nullptr);
  EXPECT_NEAR(w->eta_s, (95 - 72) / 0.1, 15);  // EWMA lags the raw value a little
  EXPECT_NE(w->message.find("crosses 95.0 C in ~"), std::string::npos) << w->message;
  EXPECT_LT(h.score, 1.0);
}

TEST(Health, ANaNReadingIsASensorFailureNotATemperature) {
  Config c;
  c.ewma_alpha = 1;
  c.clear_after_s = 2;
  Monitor m(c);
  auto ok = f64(HAL_FIELD_TEMPERATURE_C, 60);
  m.observe_telemetry(0, 0, &ok, 1);
  m.evaluate(0);
  auto nan = f64(HAL_FIELD_TEMPERATURE_C, std::nan(""));
  m.observe_telemetry(0, 1, &nan, 1);
  bool raised = false;
  for (const Event& e : m.evaluate(1))
    raised |= e.kind == Event::Kind::warning_raised && e.warning.signal == "sensor";
  EXPECT_TRUE(raised);
  EXPECT_EQ(m.device(0).state, State::suspect);
  ASSERT_EQ(m.device(0).warnings.size(), 1u);
  EXPECT_NE(m.device(0).warnings[0].message.find("a sensor failure"), std::string::npos);
  // The NaN never entered the temperature: a finite reading is what counts.
  auto hot = f64(HAL_FIELD_TEMPERATURE_C, -INFINITY);
  m.observe_telemetry(0, 2, &hot, 1);
  m.evaluate(2);
  for (int t = 3; t <= 6; ++t) {
    m.observe_telemetry(0, t, &ok, 1);
    m.evaluate(t);
  }
  EXPECT_EQ(m.device(0).state, State::healthy) << "a sensor that reads again clears";
}

TEST(Health, ThresholdsWarnThenFailAndClearAfterACalmWindow) {
  Config c;
  c.ewma_alpha = 1;  // raw values
  c.clear_after_s = 5;
  Monitor m(c);
  auto hot = f64(HAL_FIELD_TEMPERATURE_C, 91);
  m.observe_telemetry(0, 0, &hot, 1);
  m.evaluate(0);
  EXPECT_EQ(m.device(0).state, State::suspect);
  auto crit = f64(HAL_FIELD_TEMPERATURE_C, 96);
  m.observe_telemetry(0, 1, &crit, 1);
  m.evaluate(1);
  EXPECT_EQ(m.device(0).state, State::failing);
  auto cool = f64(HAL_FIELD_TEMPERATURE_C, 60);
  for (int t = 2; t <= 5; ++t) {
    m.observe_telemetry(0, t, &cool, 1);
    m.evaluate(t);
  }
  EXPECT_EQ(m.device(0).state, State::failing) << "clears only after clear_after_s";
  bool cleared = false;
  for (int t = 6; t <= 7; ++t) {
    m.observe_telemetry(0, t, &cool, 1);
    for (const Event& e : m.evaluate(t)) cleared |= e.kind == Event::Kind::warning_cleared;
  }
  EXPECT_TRUE(cleared);
  EXPECT_EQ(m.device(0).state, State::healthy);
}

TEST(Health, CorrectableEccRateAndUncorrectableErrorsAreCounted) {
  Config c;
  c.ecc_window_s = 10;
  c.ecc_per_min_suspect = 60;
  Monitor m(c);
  // 0.5 errors/s = 30/min: below the limit.
  for (int t = 0; t <= 10; ++t) {
    hal_telemetry_sample_t s[2] = {u64(HAL_FIELD_ECC_CORRECTABLE, static_cast<uint64_t>(t / 2)),
                                   u64(HAL_FIELD_ECC_UNCORRECTABLE, 3)};
    m.observe_telemetry(0, t, s, 2);
    m.evaluate(t);
  }
  EXPECT_EQ(m.device(0).state, State::healthy);
  // 5 errors/s = 300/min.
  for (int t = 11; t <= 20; ++t) {
    hal_telemetry_sample_t s[2] = {u64(HAL_FIELD_ECC_CORRECTABLE, static_cast<uint64_t>(5 + (t - 10) * 5)),
                                   u64(HAL_FIELD_ECC_UNCORRECTABLE, 3)};
    m.observe_telemetry(0, t, s, 2);
    m.evaluate(t);
  }
  const DeviceHealth h = m.device(0);
  const Warning* w = find(h, "ecc_rate");
  ASSERT_NE(w, nullptr);
  EXPECT_GT(w->value, 200);
  EXPECT_EQ(m.device(0).state, State::suspect);
  // The uncorrectable counter was 3 from the start: only an increase counts.
  auto unc = u64(HAL_FIELD_ECC_UNCORRECTABLE, 4);
  m.observe_telemetry(0, 21, &unc, 1);
  m.evaluate(21);
  EXPECT_EQ(m.device(0).state, State::failing);
  const DeviceHealth h2 = m.device(0);
  EXPECT_NE(find(h2, "threshold"), nullptr);
}

TEST(Health, AStragglerIsNamedAgainstItsPeers) {
  Monitor m;
  for (uint32_t d = 0; d < 4; ++d) m.add_device(d);
  // 2.1x as slow but only 11 ms more: noise on a tiny step, not a straggler.
  for (uint64_t step = 0; step < 30; ++step) {
    for (uint32_t d = 0; d < 4; ++d) m.observe_step(d, step, d == 2 ? 0.021 : 0.010, step);
  }
  m.evaluate(30);
  EXPECT_EQ(m.device(2).state, State::healthy);
  for (uint64_t step = 30; step < 60; ++step) {
    for (uint32_t d = 0; d < 4; ++d) m.observe_step(d, step, d == 2 ? 0.210 : 0.100, step);
  }
  m.evaluate(60);
  EXPECT_EQ(m.device(2).state, State::suspect);
  const DeviceHealth h = m.device(2);
  const Warning* w = find(h, "straggler");
  ASSERT_NE(w, nullptr);
  EXPECT_NEAR(w->value, 2.1, 1e-9);
  for (uint32_t d : {0u, 1u, 3u}) EXPECT_EQ(m.device(d).state, State::healthy);
}

TEST(Health, HeartbeatLossAndALostDeviceFailUntilReset) {
  Config c;
  c.heartbeat_timeout_s = 2;
  Monitor m(c);
  m.observe_heartbeat(0, 0);
  m.observe_heartbeat(1, 0);
  m.evaluate(1);
  EXPECT_EQ(m.device(0).state, State::healthy);
  m.observe_heartbeat(1, 2);
  auto events = m.evaluate(2.5);
  ASSERT_EQ(m.device(0).state, State::failed);
  EXPECT_EQ(m.device(1).state, State::healthy);
  EXPECT_DOUBLE_EQ(m.device(0).score, 0.0);
  bool said = false;
  for (const Event& e : events) said |= e.kind == Event::Kind::state_changed && e.warning.rule == "heartbeat";
  EXPECT_TRUE(said);
  m.observe_heartbeat(0, 3);  // too late: a failed device stays failed
  m.evaluate(100);
  EXPECT_EQ(m.device(0).state, State::failed);
  m.reset(0);
  EXPECT_EQ(m.device(0).state, State::healthy);

  hal_telemetry_sample_t lost{};
  lost.id = HAL_FIELD_TEMPERATURE_C;
  lost.status = HAL_ERR_DEVICE_LOST;
  m.observe_telemetry(5, 101, &lost, 1);
  m.evaluate(101);
  EXPECT_EQ(m.device(5).state, State::failed);
  EXPECT_EQ(m.device(5).warnings.at(0).rule, "device_lost");
}

TEST(Health, CollectiveErrorsMakeADeviceSuspect) {
  Config c;
  c.clear_after_s = 1;
  Monitor m(c);
  m.observe_error(3, Code::timeout, "all_reduce did not finish in 5 s", 0);
  m.evaluate(0);
  EXPECT_EQ(m.device(3).state, State::suspect);
  EXPECT_NE(m.device(3).warnings.at(0).message.find("timeout: all_reduce"), std::string::npos);
  m.evaluate(2);
  EXPECT_EQ(m.device(3).state, State::healthy);
}

TEST(Health, ImpossibleConfigsAreRefusedByName) {
  Config c;
  c.critical_c = 80;  // below warn_c
  try {
    Monitor m(c);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("critical_c"), std::string::npos);
  }
  Config d;
  d.ewma_alpha = 0;
  EXPECT_THROW(Monitor{d}, Error);
}

// thermal_runaway: device 1 ramps from 55 C toward 104 C from scenario second
// 30 to 90 and is lost at 100. At 25 scenario seconds per real second the
// ramp starts 1.2 s in and the loss comes at 4 s.
TEST(HealthSampler, WarnsOnTheSimThermalRampBeforeTheDeviceIsLost) {
  hal::LoadOptions lo;
  lo.options = std::string("scenario=") + SIGMA_SCENARIO_DIR + "/thermal_runaway.yaml;rank=1;time_scale=25";
  auto plugin = hal::Plugin::load("sim", lo);
  const double t0 = monotonic_s();
  Config c;
  c.trend_window_s = 0.5;
  c.trend_horizon_s = 4;  // 100 scenario seconds
  c.trend_min_slope_c_per_s = 1;
  Monitor m(c);
  Sampler sampler(*plugin, {0}, m, 50);
  sampler.start();
  double warned = -1, failed = -1;
  std::string warned_by;
  while (monotonic_s() - t0 < 8 && failed < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double now = monotonic_s();
    for (const Event& e : m.evaluate(now)) {
      if (e.kind != Event::Kind::state_changed) continue;
      if (e.to >= State::suspect && warned < 0) {
        warned = now - t0;
        warned_by = e.warning.signal + "/" + e.warning.rule + ": " + e.warning.message;
      }
      if (e.to == State::failed) failed = now - t0;
    }
  }
  sampler.stop();
  ASSERT_GE(warned, 0) << "no warning";
  ASSERT_GE(failed, 0) << "the loss was not seen";
  EXPECT_GT(sampler.rounds(), 50u);
  EXPECT_GT(warned, 1.0) << "warned before the ramp began: " << warned_by;
  EXPECT_LT(warned, 3.6) << "warned too late (the device is lost at 4 s): " << warned_by;
  EXPECT_GE(failed, 3.8);
  EXPECT_EQ(m.device(0).state, State::failed);
  std::printf("warned at %.2f s (%s), failed at %.2f s\n", warned, warned_by.c_str(), failed);
}

}  // namespace
}  // namespace sigma::health
