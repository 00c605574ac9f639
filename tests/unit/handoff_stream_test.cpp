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

// Views that do not line up with the stream's 16 MiB pieces: one large
// enough for pieces of its own (two of them), small ones around it that
// travel together, and one of exactly 1 MiB (pieces of its own).
struct State {
  std::vector<int32_t> head = std::vector<int32_t>(1021);
  std::vector<float> a = std::vector<float>((5u << 20) + 3);
  std::vector<int32_t> b = std::vector<int32_t>(1021);
  std::vector<uint8_t> c = std::vector<uint8_t>(7);
  std::vector<uint8_t> d = std::vector<uint8_t>(1u << 20);
  void fill(int32_t seed) {
    std::iota(head.begin(), head.end(), 3 * seed);
    std::iota(a.begin(), a.end(), static_cast<float>(seed));
    std::iota(b.begin(), b.end(), -seed);
    std::iota(c.begin(), c.end(), static_cast<uint8_t>(seed));
    std::iota(d.begin(), d.end(), static_cast<uint8_t>(seed + 1));
  }
  uint64_t bytes() const {
    return (head.size() + b.size()) * sizeof(int32_t) + a.size() * sizeof(float) + c.size() + d.size();
  }
  std::vector<checkpoint::TensorView> views() {
    return {checkpoint::TensorView("head", HAL_DTYPE_I32, {static_cast<int64_t>(head.size())}, head.data()),
            checkpoint::TensorView("a", HAL_DTYPE_F32, {static_cast<int64_t>(a.size())}, a.data()),
            checkpoint::TensorView("b", HAL_DTYPE_I32, {static_cast<int64_t>(b.size())}, b.data()),
            checkpoint::TensorView("c", HAL_DTYPE_U8, {static_cast<int64_t>(c.size())}, c.data()),
            checkpoint::TensorView("d", HAL_DTYPE_U8, {static_cast<int64_t>(d.size())}, d.data())};
  }
};

// The cut tiles the image in order; a large view's pieces lie in it alone.
TEST(HandoffPieces, TileTheImageAndGiveLargeViewsPiecesOfTheirOwn) {
  State s;
  const auto views = s.views();
  const auto pieces = handoff_pieces(views);
  const uint64_t head = s.head.size() * 4, a = s.a.size() * 4, small = s.b.size() * 4 + s.c.size();
  ASSERT_EQ(pieces.size(), 5u);
  const std::vector<std::pair<uint64_t, uint64_t>> want{{0, head},
                                                        {head, 16u << 20},
                                                        {head + (16u << 20), a - (16u << 20)},
                                                        {head + a, small},
                                                        {head + a + small, 1u << 20}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(pieces[i].at, want[i].first) << i;
    EXPECT_EQ(pieces[i].bytes, want[i].second) << i;
  }
  EXPECT_EQ(pieces[1].view, 1);
  EXPECT_EQ(pieces[1].offset, 0u);
  EXPECT_EQ(pieces[2].view, 1);
  EXPECT_EQ(pieces[2].offset, 16u << 20);
  EXPECT_EQ(pieces[0].view, -1);
  EXPECT_EQ(pieces[3].view, -1);
  EXPECT_EQ(pieces[4].view, 4);
}

// Many small views: runs cut at 16 MiB, never a piece larger.
TEST(HandoffPieces, RunsOfSmallViewsAreCutAt16MiB) {
  std::vector<std::vector<uint8_t>> bufs(40, std::vector<uint8_t>((1u << 20) - 1));
  std::vector<checkpoint::TensorView> views;
  for (auto& b : bufs)
    views.emplace_back("v", HAL_DTYPE_U8, std::vector<int64_t>{static_cast<int64_t>(b.size())}, b.data());
  const auto pieces = handoff_pieces(views);
  uint64_t at = 0;
  for (const auto& p : pieces) {
    EXPECT_EQ(p.at, at);
    EXPECT_LE(p.bytes, 16u << 20);
    EXPECT_EQ(p.view, -1);
    at += p.bytes;
  }
  EXPECT_EQ(at, 40u * ((1u << 20) - 1));
  EXPECT_EQ(handoff_pieces({}).size(), 0u);
}

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
      sender = std::make_unique<HandoffSender>(c, plugin, tier.own_image(4), state.views(), kTimeout);
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
  EXPECT_TRUE(got.head == want.head);  // a run of small views, through the scratch
  EXPECT_TRUE(got.a == want.a);        // pieces of its own, landed in place
  EXPECT_TRUE(got.b == want.b && got.c == want.c);
  EXPECT_TRUE(got.d == want.d);
}

INSTANTIATE_TEST_SUITE_P(CopyOrSnapshot, HandoffStream, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("FromTheTiersSnapshot") : std::string("FromACopy");
                         });

}  // namespace
}  // namespace sigma::runtime
