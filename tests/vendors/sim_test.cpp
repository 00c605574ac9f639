// The sim vendor through the real ABI: scenarios refused with file, line,
// key and reason; each fault kind observed as a host sees it; telemetry
// precursors; same seed, same values.
#include <sigma/hal.hpp>

#include "run_state.hpp"
#include "scenario.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

namespace sigma::hal {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string write_scenario(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "sim-" + std::to_string(::getpid()) + "-" + name + ".yaml";
  std::ofstream(path) << text;
  return path;
}

PluginPtr load_sim(const std::string& options) {
  LoadOptions lo;
  lo.options = options;
  return Plugin::load("sim", lo);
}

hal_comm_create_args_t world_of_one() {
  hal_comm_create_args_t a{};
  a.struct_size = sizeof(a);
  a.world_size = 1;
  a.timeout_ns = 10'000'000'000ull;
  return a;
}

hal_coll_args_t all_reduce(const Buffer& b, uint64_t count) {
  hal_coll_args_t a{};
  a.struct_size = sizeof(a);
  a.op = HAL_COLL_ALL_REDUCE;
  a.dtype = HAL_DTYPE_F32;
  a.count = count;
  a.sendbuf = a.recvbuf = b.data();
  return a;
}

double read_f64(const PluginPtr& p, hal_field_id_t id) { return p->read_telemetry(0, {id})[0].value.f64; }
hal_telemetry_sample_t read(const PluginPtr& p, hal_field_id_t id) { return p->read_telemetry(0, {id})[0]; }

// ---- scenarios refused --------------------------------------------------

struct Bad {
  const char* name;
  const char* text;
  const char* expect;  // must appear in the message, after "FILE:"
};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }

class RefusedScenario : public ::testing::TestWithParam<Bad> {};

TEST_P(RefusedScenario, NamesFileLineKeyAndReason) {
  const Bad& b = GetParam();
  const std::string path = write_scenario(b.name, b.text);
  try {
    load_sim("scenario=" + path);
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(path + ":" + b.expect), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sim, RefusedScenario,
    ::testing::Values(
        Bad{"syntax", "duration_s: 10\nfaults: [ {kind: hang\n", "3: (syntax)"},
        Bad{"two_documents", "duration_s: 10\n---\nduration_s: 20\n",
            "3: (top): a second YAML document starts here"},
        Bad{"unknown_key", "duration_s: 10\nwolrd_size: 4\n", "2: wolrd_size: unknown key"},
        Bad{"wrong_type", "duration_s: ten\n", "1: duration_s: expected a number, found 'ten'"},
        Bad{"negative_rate",
            "duration_s: 10\ndevices:\n  default:\n    telemetry:\n      ecc_correctable_per_s: -1\n",
            "5: devices.default.telemetry.ecc_correctable_per_s: -1"},
        Bad{"unknown_device",
            "duration_s: 10\nworld_size: 2\nfaults:\n  - {kind: hang, device: 5, at_op: 1}\n",
            "4: faults[0].device: unknown device 5 (world_size is 2)"},
        Bad{"after_end", "duration_s: 10\nfaults:\n  - {kind: device_lost, device: 0, at_s: 11}\n",
            "3: faults[0].at_s: 11.000000 is after the scenario's end"},
        Bad{"both_times", "duration_s: 10\nfaults:\n  - {kind: hang, device: 0, at_s: 1, at_op: 2}\n",
            "3: faults[0]: give at_s or at_op, not both"},
        Bad{"unknown_fault", "duration_s: 10\nfaults:\n  - {kind: meltdown, device: 0, at_s: 1}\n",
            "3: faults[0].kind: unknown fault kind 'meltdown'"},
        Bad{"missing_factor", "duration_s: 10\nfaults:\n  - {kind: slow_link, device: 0, at_s: 1}\n",
            "3: faults[0].factor: missing"},
        Bad{"bandwidth_without_rate",
            "duration_s: 10\nfaults:\n  - {kind: slow_bandwidth, device: 0, at_s: 1, factor: 4}\n",
            "3: faults[0].gbps: missing: the link's healthy rate"},
        Bad{"rate_on_a_hang", "duration_s: 10\nfaults:\n  - {kind: hang, device: 0, at_s: 1, gbps: 1}\n",
            "3: faults[0].gbps: only slow_link, flapping_link and slow_bandwidth have a link rate"},
        Bad{"latency_on_slow_bandwidth",
            "duration_s: 10\nfaults:\n  - {kind: slow_bandwidth, device: 0, at_s: 1, factor: 4, gbps: 1, "
            "latency_us: 5}\n",
            "3: faults[0].latency_us: only slow_link and flapping_link stretch a latency"},
        Bad{"duplicate_key", "duration_s: 10\nseed: 1\nseed: 2\n",
            "3: seed: given twice (one value would silently replace the other)"},
        Bad{"same_device_twice",
            "duration_s: 10\nworld_size: 4\ndevices:\n  1:\n    telemetry: {}\n  01:\n    telemetry: {}\n",
            "6: devices.01: device 1 given twice"},
        Bad{"deep_nesting",
            "duration_s: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
            "0: (top): nesting deeper than 32 levels"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Sim, EverySampleScenarioLoads) {
  for (const auto& e : fs::directory_iterator(SIGMA_SCENARIO_DIR)) {
    if (e.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(load_sim("scenario=" + e.path().string())) << e.path();
  }
}

// A scenario that is a FIFO would block the plugin's init for ever: it is
// refused at once, by name, as are a folder and a device.
TEST(Sim, AScenarioThatIsNotARegularFileIsRefusedWithoutBlocking) {
  const std::string fifo = ::testing::TempDir() + "sim-fifo-" + std::to_string(::getpid()) + ".yaml";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ::alarm(20);  // a blocked init fails here, not at CTest's limit
  for (const auto& [path, kind] : {std::pair<std::string, std::string>{fifo, "a FIFO"},
                                   {::testing::TempDir(), "a folder"},
                                   {"/dev/null", "a device"}}) {
    try {
      load_sim("scenario=" + path);
      ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(":0: (file): not a regular file (" + kind + ")"),
                std::string::npos)
          << e.what();
    }
  }
  ::alarm(0);
  ::unlink(fifo.c_str());
}

TEST(Sim, MissingScenarioFileAndBadOptionsAreRefused) {
  EXPECT_THROW(load_sim("scenario=/nonexistent/s.yaml"), Error);
  EXPECT_THROW(load_sim("time_scale=-2"), Error);
  EXPECT_THROW(load_sim("inner=sim"), Error);
  EXPECT_THROW(load_sim("colour=red"), Error);
}

// ---- faults, as the host sees them -----------------------------------------

TEST(SimFault, DeviceLostAtAnOpFailsThatOpAndEverythingAfter) {
  const auto path =
      write_scenario("lost", "duration_s: 100\nfaults:\n  - {kind: device_lost, device: 0, at_op: 3}\n");
  auto p = load_sim("scenario=" + path);
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 64);
  for (int i = 0; i < 3; ++i) comm.run(all_reduce(b, 16), 5s);
  try {
    comm.post(all_reduce(b, 16));
    FAIL() << "posted on a lost device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::device_lost);
  }
  EXPECT_THROW(p->device_props(0), Error);
  EXPECT_EQ(comm.async_error(), HAL_ERR_DEVICE_LOST);
  EXPECT_EQ(read(p, HAL_FIELD_TEMPERATURE_C).status, HAL_ERR_DEVICE_LOST);
  EXPECT_EQ(read(p, HAL_FIELD_FATAL_CODE).value.i64, 79);
}

TEST(SimFault, HangAtAnOpNeverCompletesUntilAborted) {
  const auto path =
      write_scenario("hang", "duration_s: 100\nfaults:\n  - {kind: hang, device: 0, at_op: 1}\n");
  auto p = load_sim("scenario=" + path);
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 64);
  comm.run(all_reduce(b, 16), 5s);
  auto req = comm.post(all_reduce(b, 16));
  EXPECT_FALSE(req.wait(200ms));
  std::thread t([&] { comm.abort(); });
  try {
    req.wait(10s);
    ADD_FAILURE() << "completed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::aborted);
  }
  t.join();
}

TEST(SimFault, ADeviceLostWhileAnOperationWaitsFailsTheWaitWithDeviceLost) {
  const auto path = write_scenario("lost_waiting",
                                   "duration_s: 100\nfaults:\n  - {kind: hang, device: 0, at_op: 0}\n  - "
                                   "{kind: device_lost, device: 0, at_s: 0.3}\n");
  auto p = load_sim("scenario=" + path);
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 64);
  auto req = comm.post(all_reduce(b, 16));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    req.wait(20s);
    ADD_FAILURE() << "completed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::device_lost) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(SimFault, SilentCorruptionChangesExactlyOneElementOfTheChosenResult) {
  const auto path =
      write_scenario("sdc", "duration_s: 100\nfaults:\n  - {kind: silent_corruption, device: 0, at_op: 1}\n");
  auto p = load_sim("scenario=" + path);
  Communicator comm(p, world_of_one());
  const uint64_t n = 1024;
  Buffer b(p, 0, n * 4);
  std::vector<float> ones(n, 1.0f), out(n);
  for (int op = 0; op < 3; ++op) {
    b.copy_from_host(ones.data(), n * 4);
    comm.run(all_reduce(b, n), 5s);  // no error is ever reported
    b.copy_to_host(out.data(), n * 4);
    const auto wrong = std::count_if(out.begin(), out.end(), [](float v) { return v != 1.0f; });
    EXPECT_EQ(wrong, op == 1 ? 1 : 0) << "op " << op;
  }
}

// A slow link of factor F adds (F - 1) x (latency + link bytes / rate) to
// each operation: its own transfer, never the time it waited. A world of
// one moves no bytes over the link, so each operation gains exactly
// (F - 1) x latency: 19 x 2 ms here. Each slowed operation is timed on its
// own (two windows of five compared by their sums differ by more than the
// noise of one operation's own time on a loaded machine).
TEST(SimFault, SlowLinkStretchesEachOperationsOwnTransferByItsFactor) {
  const auto path = write_scenario("slow",
                                   "duration_s: 1000\nfaults:\n  - {kind: slow_link, device: 0, at_op: 10, "
                                   "factor: 20, latency_us: 2000}\n");
  auto p = load_sim("scenario=" + path);
  Communicator comm(p, world_of_one());
  const uint64_t n = 1u << 20;
  Buffer src(p, 0, n * 4), dst(p, 0, n * 4);
  hal_coll_args_t a = all_reduce(dst, n);
  a.sendbuf = src.data();
  auto timed = [&] {
    std::vector<double> each;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      comm.run(a, 30s);
      each.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return each;
  };
  auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  timed();                             // operations 0-4 warm the buffers
  const double normal = sum(timed());  // 5-9: before the fault
  const std::vector<double> slow = timed();
  const double added_each = 19 * 2e-3;
  for (size_t i = 0; i < slow.size(); ++i)
    EXPECT_GE(slow[i], added_each) << "operation " << 10 + i << " took " << slow[i] << " s";
  const double added = 5 * added_each;
  EXPECT_LT(sum(slow) - normal, added + 4 * normal + 0.1)
      << "normal " << normal << " s, slow " << sum(slow) << " s";
}

// The fault-injection extension's slow link uses the healthy figures the
// scenario's faults default to (kHealthyLinkLatencyUs).
TEST(SimFault, AnInjectedSlowLinkStretchesByTheDefaultLatency) {
  auto p = load_sim("");
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 64 * 4);
  auto timed = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) comm.run(all_reduce(b, 64), 30s);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double normal = timed();
  hal_fault_spec_t spec{};
  spec.struct_size = sizeof(spec);
  spec.kind = HAL_FAULT_SLOW_LINK;
  spec.factor = 101;
  p->check(p->fault_injection()->inject(&spec), "inject");
  const double slow = timed();
  EXPECT_GE(slow - normal, 20 * 100 * sim_vendor::kHealthyLinkLatencyUs * 1e-6)
      << "normal " << normal << " s, slow " << slow << " s";
}

TEST(SimFault, FlappingLinkRaisesLinkErrorsEveryPeriod) {
  const auto path = write_scenario("flap",
                                   "duration_s: 1000\ntime_scale: 100\nfaults:\n  - {kind: flapping_link, "
                                   "device: 0, at_s: 0, duration_s: 500, period_s: 10, factor: 5}\n");
  auto p = load_sim("scenario=" + path);
  const uint64_t before = read(p, HAL_FIELD_LINK_ERRORS).value.u64;
  std::this_thread::sleep_for(600ms);  // 60 scenario seconds: 6 periods
  const uint64_t after = read(p, HAL_FIELD_LINK_ERRORS).value.u64;
  EXPECT_GE(after - before, 5u * 4);
  EXPECT_GT(read(p, HAL_FIELD_LINK_RETRIES).value.u64, after);
}

TEST(SimFault, CrashTakesTheProcessDown) {
  EXPECT_EXIT(
      {
        const auto path =
            write_scenario("crash", "duration_s: 100\nfaults:\n  - {kind: crash, device: 0, at_op: 2}\n");
        auto p = load_sim("scenario=" + path);
        Communicator comm(p, world_of_one());
        Buffer b(p, 0, 64);
        for (int i = 0; i < 5; ++i) comm.run(all_reduce(b, 16), 5s);
        std::exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGKILL), "");
}

// ---- telemetry -------------------------------------------------------------

TEST(SimTelemetry, ThermalRunawayShowsItsPrecursorsBeforeTheDeviceIsLost) {
  // The sample scenario at 50x: 30 s of calm, a 60 s ramp to 104 C, an ECC
  // burst, then the device falls off the bus at 100 s (2 s real). Above 95 C
  // for the last 21 scenario seconds: 0.4 s real, many reads even on a busy
  // machine.
  auto p =
      load_sim(std::string("rank=1;time_scale=50;scenario=") + SIGMA_SCENARIO_DIR + "/thermal_runaway.yaml");
  const double t_start = read_f64(p, HAL_FIELD_TEMPERATURE_C);
  EXPECT_NEAR(t_start, 55, 2);
  double hottest = 0;
  bool throttled = false;
  uint64_t ecc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < 10s) {
    auto s = p->read_telemetry(
        0, {HAL_FIELD_TEMPERATURE_C, HAL_FIELD_THROTTLE_REASONS, HAL_FIELD_ECC_CORRECTABLE});
    if (s[0].status == HAL_ERR_DEVICE_LOST) break;
    hottest = std::max(hottest, s[0].value.f64);
    throttled |= (s[1].value.u64 & HAL_THROTTLE_THERMAL) != 0;
    ecc = std::max(ecc, s[2].value.u64);
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GT(hottest, 95.0);
  EXPECT_TRUE(throttled);
  EXPECT_GT(ecc, 100u);
  EXPECT_EQ(read(p, HAL_FIELD_TEMPERATURE_C).status, HAL_ERR_DEVICE_LOST);
  EXPECT_THROW(p->device_props(0), Error);
}

TEST(SimTelemetry, TheSameSeedGivesTheSameValues) {
  auto sample = [] {
    auto p = load_sim(std::string("rank=2;scenario=") + SIGMA_SCENARIO_DIR + "/healthy.yaml");
    std::vector<double> v;
    for (int i = 0; i < 20; ++i) v.push_back(read_f64(p, HAL_FIELD_POWER_W));
    return v;
  };
  const auto a = sample(), b = sample();
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], a[1]);  // there is noise, and it is seeded
}

TEST(SimTelemetry, InjectedExcursionOverridesAFieldForItsDuration) {
  auto p = load_sim("");
  hal_fault_spec_t spec{};
  spec.struct_size = sizeof(spec);
  spec.kind = HAL_FAULT_TELEMETRY_EXCURSION;
  spec.field = HAL_FIELD_TEMPERATURE_C;
  spec.value = 123.5;
  spec.duration_ns = 200'000'000;
  p->check(p->fault_injection()->inject(&spec), "inject");
  EXPECT_DOUBLE_EQ(read_f64(p, HAL_FIELD_TEMPERATURE_C), 123.5);
  std::this_thread::sleep_for(300ms);
  EXPECT_LT(read_f64(p, HAL_FIELD_TEMPERATURE_C), 100.0);
}

// ---- every sample scenario, replayed --------------------------------------

namespace {

// Runs rank `rank` of a sample scenario at 1000x with a world-of-one
// communicator, one all-reduce of 64 floats at a time, and checks that each
// fault the scenario gives this rank shows through the ABI.
void replay(const std::string& file, const sim_vendor::Scenario& sc, uint32_t rank) {
  SCOPED_TRACE(file + " rank " + std::to_string(rank));
  auto p = load_sim("time_scale=1000;rank=" + std::to_string(rank) + ";scenario=" + file);
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 64 * 4);
  std::vector<float> ones(64, 1.0f), out(64);
  bool lost = false, corrupted = false;
  // Long enough for every timed fault of this rank to come due (at 1000x).
  double last_s = 0;
  for (const auto& f : sc.faults)
    if (f.device == rank && f.at_s) last_s = std::max(last_s, *f.at_s + f.duration_s);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(last_s / 1000.0 + 0.1);
  uint64_t op = 0;
  while (std::chrono::steady_clock::now() < deadline || op < 600) {
    try {  // a timed device loss can strike any call
      b.copy_from_host(ones.data(), 64 * 4);
      comm.run(all_reduce(b, 64), 10s);
      b.copy_to_host(out.data(), 64 * 4);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::device_lost) << e.what();
      lost = true;
      break;
    }
    corrupted |= std::any_of(out.begin(), out.end(), [](float v) { return v != 1.0f; });
    ++op;
  }
  for (const auto& f : sc.faults) {
    if (f.device != rank) continue;
    switch (f.kind) {
      case sim_vendor::FaultKind::device_lost:
        EXPECT_TRUE(lost) << "device_lost never seen";
        break;
      case sim_vendor::FaultKind::silent_corruption:
      case sim_vendor::FaultKind::nan_burst:
        EXPECT_TRUE(corrupted || lost) << "no corrupted result";
        break;
      case sim_vendor::FaultKind::slow_link:
      case sim_vendor::FaultKind::flapping_link:
      case sim_vendor::FaultKind::slow_bandwidth:
        if (!lost) {
          EXPECT_GT(read(p, HAL_FIELD_LINK_RETRIES).value.u64, 0u);
        }
        break;
      default:
        break;  // hang and crash have tests of their own
    }
  }
  if (std::none_of(sc.faults.begin(), sc.faults.end(), [&](const auto& f) { return f.device == rank; })) {
    EXPECT_FALSE(lost);
    EXPECT_FALSE(corrupted);
  }
}

}  // namespace

TEST(SimScenarios, EverySampleRunsAndItsFaultsShowThroughTheAbi) {
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(SIGMA_SCENARIO_DIR)) {
    if (e.path().extension() != ".yaml") continue;
    std::string err;
    auto sc = sim_vendor::load_scenario(e.path().string(), err);
    ASSERT_TRUE(sc.has_value()) << err;
    for (uint32_t r = 0; r < sc->world_size; ++r) {
      const bool crashes = std::any_of(sc->faults.begin(), sc->faults.end(), [&](const auto& f) {
        return f.device == r && f.kind == sim_vendor::FaultKind::crash;
      });
      if (!crashes) {
        replay(e.path().string(), *sc, r);
        continue;
      }
      // A crash kills the process it strikes: that rank replays in a child,
      // which must die by SIGKILL.
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        replay(e.path().string(), *sc, r);
        std::_Exit(0);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << e.path() << " rank " << r << ": the crash did not strike (status " << status << ")";
    }
    ++files;
  }
  EXPECT_GE(files, 5u);
}

}  // namespace
}  // namespace sigma::hal

namespace sigma::hal {
namespace {

// The processes of one sigmarun run share the scenario clock and strike a
// crash once; another run in the same folder (another store) starts afresh.
TEST(SimRunState, OneRunSharesItsClockAndStrikesACrashOnce) {
  const std::string dir = ::testing::TempDir() + "sim-run-state-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::setenv("SIGMA_STORE", "file:///run/a", 1);
  sim_vendor::RunState first, second;
  first.open(dir);
  second.open(dir);
  EXPECT_EQ(first.origin(1000), 1000u) << "the first process sets the origin";
  EXPECT_EQ(second.origin(5000), 1000u) << "a later process of the run reads it";
  EXPECT_TRUE(first.first_strike(3, 0));
  EXPECT_FALSE(second.first_strike(3, 0)) << "a restarted worker is not crashed again";
  EXPECT_TRUE(second.first_strike(3, 1)) << "another fault strikes";
  ::setenv("SIGMA_STORE", "file:///run/b", 1);
  sim_vendor::RunState other;
  other.open(dir);
  EXPECT_EQ(other.origin(7000), 7000u) << "another run has its own clock";
  EXPECT_TRUE(other.first_strike(3, 0));
  ::unsetenv("SIGMA_STORE");
  sim_vendor::RunState plain;
  plain.open(dir);
  EXPECT_EQ(plain.origin(9000), 9000u) << "no store: each process its own clock";
  EXPECT_TRUE(plain.first_strike(3, 0));
  EXPECT_TRUE(plain.first_strike(3, 0));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sigma::hal
