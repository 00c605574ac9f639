// The cpu vendor's rendezvous honours the host's cancellation: a rank
// creating a communicator whose peers never come (they died, or the job
// aborted the round) leaves as soon as the host cancels the bootstrap,
// through Gloo's own client of a file:// store as through the callbacks,
// instead of waiting out the creation's timeout.
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

namespace sigma::hal {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Rank 0 of 2 creates a communicator alone; the host cancels after 300 ms.
// Returns how long creation took and the code it failed with.
std::pair<double, Code> cancelled_creation(const std::string& options, const fs::path& dir) {
  LoadOptions lo;
  lo.options = options;
  auto plugin = Plugin::load("cpu", lo);
  auto boot = std::make_shared<bootstrap::HalBootstrap>(bootstrap::open_store("file://" + dir.string()),
                                                        "comm-cancel/");
  EXPECT_EQ(std::string(boot->table()->store_uri), "file://" + dir.string());
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = 0;
  ca.world_size = 2;
  ca.bootstrap = boot->table();
  ca.timeout_ns = 30'000'000'000ull;
  const auto t0 = Clock::now();
  auto created = std::async(std::launch::async, [&]() -> Code {
    try {
      Communicator c(plugin, ca);
      return Code::ok;
    } catch (const Error& e) {
      return e.code();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  boot->cancel();
  const Code code = created.get();
  return {std::chrono::duration<double>(Clock::now() - t0).count(), code};
}

TEST(CpuBootstrap, ACreationWaitingForAbsentPeersEndsWhenTheHostCancels) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("cpu-cancel-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const std::string options : {"", "store=callbacks"}) {
    const auto [seconds, code] = cancelled_creation(options, dir);
    EXPECT_EQ(code_name(code), "unavailable") << "options '" << options << "'";
    EXPECT_LT(seconds, 5.0) << "options '" << options << "': waited for the 30 s timeout";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sigma::hal
