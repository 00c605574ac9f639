// Contained recovery's hand-off stream over a real two-rank Gloo
// communicator (the cpu vendor; the donor a child process): the donor's state
// arrives whole in the receiver's tensors whether the donor copies its
// tensors or streams the memory tier's snapshot of the boundary as it
// lies, and the records that follow (an exchange, the rejoin notice)
// arrive in order after it.
#include "runtime/handoff_stream.hpp"

#include <sigma/bootstrap.hpp>
#include <sigma/memory_tier.hpp>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

namespace sigma::runtime {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

// Two tensors that do not line up with the stream's 16 MiB pieces.
struct State {
  std::vector<float> a = std::vector<float>((5u << 20) + 3);
  std::vector<int32_t> b = std::vector<int32_t>(1021);
  void fill(int32_t seed) {
    std::iota(a.begin(), a.end(), static_cast<float>(seed));
    std::iota(b.begin(), b.end(), -seed);
  }
  uint64_t bytes() const { return a.size() * sizeof(float) + b.size() * sizeof(int32_t); }
  std::vector<checkpoint::TensorView> views() {
    return {checkpoint::TensorView("a", HAL_DTYPE_F32, {static_cast<int64_t>(a.size())}, a.data()),
            checkpoint::TensorView("b", HAL_DTYPE_I32, {static_cast<int64_t>(b.size())}, b.data())};
  }
};

std::shared_ptr<hal::Communicator> comm(hal::PluginPtr plugin, uint32_t rank, bootstrap::HalBootstrap& boot) {
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = rank;
  ca.world_size = 2;
  ca.bootstrap = boot.table();
  ca.timeout_ns = 60'000'000'000ull;
  return std::make_shared<hal::Communicator>(std::move(plugin), ca);
}

// A world of one: the donor's memory tier snapshots through it.
std::unique_ptr<hal::Communicator> alone(hal::PluginPtr plugin) {
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.world_size = 1;
  return std::make_unique<hal::Communicator>(std::move(plugin), ca);
}

class HandoffStream : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ =
        (std::filesystem::temp_directory_path() / ("sigma-handoff-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir_);
    plugin_ = hal::Plugin::load("cpu");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  hal::PluginPtr plugin_;
};

// The donor: rank 0, in a child process (the cpu vendor forms one rank a
// process). Exits 0 when it sent what it should have.
[[noreturn]] void donor(const std::string& dir, hal::PluginPtr plugin, bool from_snapshot,
                        const std::vector<float>& exchanged) {
  try {
    State state;
    state.fill(7);
    auto store = std::make_shared<bootstrap::FileStore>(dir);
    bootstrap::HalBootstrap boot(store, "h/");
    auto c = comm(plugin, 0, boot);
    checkpoint::MemoryTier tier({.keep = 1});
    auto one = alone(plugin);
    tier.snapshot(4, state.views(), *one, 0, 1);  // the boundary's snapshot, as a step takes it
    std::unique_ptr<HandoffSender> sender;
    if (from_snapshot)
      sender = std::make_unique<HandoffSender>(c, plugin, tier.own_image(4), state.bytes(), kTimeout);
    else
      sender = std::make_unique<HandoffSender>(c, plugin, state.views(), kTimeout);
    state.fill(99);                               // the donor steps on: what was taken is what travels
    tier.snapshot(5, state.views(), *one, 0, 1);  // drops 4: a lent snapshot is not written again
    sender->exchange(5, exchanged.data(), exchanged.size() * sizeof(float));
    sender->rejoin(5, 3);
    sender->finish();
    const uint64_t want = state.bytes() + 2 * sizeof(StreamHeader) + exchanged.size() * sizeof(float);
    if (sender->bytes_sent() != want) {
      std::fprintf(stderr, "donor: sent %llu bytes, not %llu\n",
                   static_cast<unsigned long long>(sender->bytes_sent()),
                   static_cast<unsigned long long>(want));
      std::_Exit(2);
    }
    sender.reset();
    c.reset();
    std::_Exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "donor: %s\n", e.what());
    std::_Exit(1);
  }
}

TEST_P(HandoffStream, TheDonorsStateAndItsLaterRecordsArriveWhole) {
  const std::vector<float> exchanged{1.5f, -2.0f, 3.25f};
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) donor(dir_, plugin_, GetParam(), exchanged);

  State got;
  got.fill(0);
  auto store = std::make_shared<bootstrap::FileStore>(dir_);
  bootstrap::HalBootstrap boot(store, "h/");
  auto c = comm(plugin_, 1, boot);
  HandoffReceiver receiver(c, plugin_, kTimeout);
  receiver.state(got.views());
  const StreamHeader first = receiver.next();
  ASSERT_EQ(first.kind, StreamHeader::exchange);
  EXPECT_EQ(first.step, 5u);
  ASSERT_EQ(first.bytes, exchanged.size() * sizeof(float));
  std::vector<float> payload(exchanged.size());
  receiver.payload(payload.data(), first.bytes);
  EXPECT_EQ(payload, exchanged);
  const StreamHeader last = receiver.next();
  EXPECT_EQ(last.kind, StreamHeader::rejoin);
  EXPECT_EQ(last.step, 5u);
  EXPECT_EQ(last.epoch, 3u);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the donor ended with status " << status;

  State want;
  want.fill(7);
  EXPECT_EQ(got.a, want.a);
  EXPECT_EQ(got.b, want.b);
}

INSTANTIATE_TEST_SUITE_P(CopyOrSnapshot, HandoffStream, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("FromTheTiersSnapshot") : std::string("FromACopy");
                         });

}  // namespace
}  // namespace sigma::runtime
