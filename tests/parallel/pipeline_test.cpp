// The 1F1B schedule (pure), and pipelines of real processes over Gloo: the
// weight gradients of a 4-stage pipeline equal, bit for bit, the same model
// run without one; a stage killed with SIGKILL mid-step makes the others
// fail within their bound, naming it.
#include "pipe_model.hpp"
#include "ranks.hpp"

#include <sigma/pipeline.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>

namespace sigma::parallel {
namespace {

TEST(Schedule1F1B, EveryMicroBatchGoesForwardThenBackwardInOrderWithBoundedActivations) {
  for (uint32_t stages : {1u, 2u, 4u, 7u})
    for (uint32_t micro : {1u, 3u, 8u})
      for (uint32_t s = 0; s < stages; ++s) {
        const auto steps = schedule_1f1b(stages, s, micro);
        ASSERT_EQ(steps.size(), 2u * micro);
        std::set<uint32_t> forwarded;
        uint32_t next_backward = 0, next_forward = 0;
        size_t in_flight = 0, most = 0;
        for (const auto& st : steps) {
          if (st.op == PipeOp::forward) {
            EXPECT_EQ(st.micro, next_forward++);
            forwarded.insert(st.micro);
            most = std::max(most, ++in_flight);
          } else {
            EXPECT_EQ(st.micro, next_backward++) << "backwards in order";
            EXPECT_TRUE(forwarded.count(st.micro)) << "backward before forward";
            --in_flight;
          }
        }
        EXPECT_LE(most, std::min(micro, stages - s)) << "stage " << s << " of " << stages;
      }
  EXPECT_EQ(schedule_1f1b(3, 2, 2),
            (std::vector<PipeStep>{
                {PipeOp::forward, 0}, {PipeOp::backward, 0}, {PipeOp::forward, 1}, {PipeOp::backward, 1}}));
  EXPECT_THROW(schedule_1f1b(3, 3, 2), Error);
  EXPECT_DOUBLE_EQ(bubble_fraction_1f1b(4, 8), 3.0 / 11);
}

TEST(Pipeline, FourStageGradientsEqualTheUnpipelinedModelBitwise) {
  const auto want = test::reference_gradients(4, 8);
  const std::string dir = test::run_ranks(SIGMA_PARALLEL_WORKER, "pipe", 4);
  for (uint32_t s = 0; s < 4; ++s) {
    const auto got = test::read_bytes(dir + "/grad-" + std::to_string(s));
    ASSERT_EQ(got.size(), want[s].size() * sizeof(float)) << "stage " << s;
    EXPECT_EQ(std::memcmp(got.data(), want[s].data(), got.size()), 0) << "stage " << s << " differs";
    std::ifstream b(dir + "/bubble-" + std::to_string(s));
    double bubble = -1;
    b >> bubble;
    EXPECT_GE(bubble, 0);
    EXPECT_LT(bubble, 1);
    std::printf("stage %u: measured bubble %.2f (1F1B's ideal %.2f)\n", s, bubble,
                bubble_fraction_1f1b(4, 8));
  }
}

TEST(Pipeline, AKilledStageMakesTheOthersFailFastNamingIt) {
  std::vector<int> st;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir =
      test::run_ranks(SIGMA_PARALLEL_WORKER, "pipe_kill", 3, std::chrono::seconds(90), &st);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_TRUE(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL) << "stage 1 was to kill itself";
  for (uint32_t s : {0u, 2u}) {
    EXPECT_TRUE(WIFEXITED(st[s]) && WEXITSTATUS(st[s]) == 1) << "stage " << s << " status " << st[s];
    std::ifstream in(dir + "/error-" + std::to_string(s));
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find("pipeline stage " + std::to_string(s)), std::string::npos) << text;
    EXPECT_NE(text.find("stage 1 (world rank 1)"), std::string::npos) << "stage " << s << ": " << text;
  }
  // The bound is the pipeline's 20 s timeout; a dead peer's socket usually
  // ends it much sooner.
  EXPECT_LT(seconds, 60) << "the survivors took too long";
}

}  // namespace
}  // namespace sigma::parallel
