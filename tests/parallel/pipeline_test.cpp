// The 1F1B and interleaved schedules (pure, and run by a model of every
// stage whose sends complete only when received: no schedule deadlocks),
// and pipelines of real processes over Gloo: the weight gradients of a
// 4-stage pipeline, plain and interleaved, equal bit for bit the same model
// run without one; a stage killed with SIGKILL mid-step makes the others
// fail within their bound, naming it.
#include "pipe_model.hpp"
#include "ranks.hpp"

#include <sigma/pipeline.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

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

TEST(ScheduleInterleaved, EachChunkTakesItsMicroBatchesInOrderBothWays) {
  for (uint32_t stages : {2u, 3u, 4u})
    for (uint32_t chunks : {1u, 2u, 3u})
      for (uint32_t micro : {stages, 2 * stages, 4 * stages})
        for (uint32_t s = 0; s < stages; ++s) {
          const auto steps = schedule_interleaved(stages, s, chunks, micro);
          ASSERT_EQ(steps.size(), 2u * micro * chunks);
          std::vector<uint32_t> next_fwd(chunks, 0), next_bwd(chunks, 0);
          std::set<std::pair<uint32_t, uint32_t>> done;
          for (const auto& st : steps) {
            ASSERT_LT(st.chunk, chunks);
            if (st.op == PipeOp::forward) {
              EXPECT_EQ(st.micro, next_fwd[st.chunk]++);
              done.insert({st.micro, st.chunk});
            } else {
              EXPECT_EQ(st.micro, next_bwd[st.chunk]++) << "a chunk's backwards in order";
              EXPECT_TRUE(done.count({st.micro, st.chunk})) << "backward before forward";
            }
          }
          if (chunks == 1) {
            EXPECT_EQ(steps, schedule_1f1b(stages, s, micro));
          }
        }
  // Megatron's example: 4 stages, 2 chunks, 8 micro-batches; stage 0 warms
  // up with 10 forwards: micro-batches 0-3 through chunk 0, 0-3 through
  // chunk 1, then 4-5 through chunk 0.
  const auto s0 = schedule_interleaved(4, 0, 2, 8);
  EXPECT_EQ(s0[3], (PipeStep{PipeOp::forward, 3, 0}));
  EXPECT_EQ(s0[4], (PipeStep{PipeOp::forward, 0, 1}));
  EXPECT_EQ(s0[9], (PipeStep{PipeOp::forward, 5, 0}));
  EXPECT_EQ(s0[10], (PipeStep{PipeOp::forward, 6, 0}));
  EXPECT_EQ(s0[11], (PipeStep{PipeOp::backward, 0, 1}));
  EXPECT_THROW(schedule_interleaved(4, 0, 2, 6), Error);  // not a multiple of the stages
  EXPECT_THROW(schedule_interleaved(1, 0, 2, 4), Error);  // one stage cannot interleave
  EXPECT_DOUBLE_EQ(bubble_fraction_interleaved(4, 2, 8), 3.0 / 19);
  EXPECT_DOUBLE_EQ(bubble_fraction_interleaved(4, 1, 8), bubble_fraction_1f1b(4, 8));
}

TEST(ScheduleInterleaved, ActivationsGoRoundTheStagesOncePerChunk) {
  // 3 stages, 2 chunks: parts 0..5; part c * 3 + s on stage s.
  EXPECT_EQ(pipe_links(3, 0, 2, {PipeOp::forward, 0, 0}).receive_from, -1);  // the model's input
  EXPECT_EQ(pipe_links(3, 0, 2, {PipeOp::forward, 0, 1}).receive_from, 2);   // part 3 after part 2
  EXPECT_EQ(pipe_links(3, 2, 2, {PipeOp::forward, 0, 0}).send_to, 0);        // part 2 to part 3
  EXPECT_EQ(pipe_links(3, 2, 2, {PipeOp::forward, 0, 1}).send_to, -1);       // the loss
  EXPECT_EQ(pipe_links(3, 2, 2, {PipeOp::backward, 0, 1}).receive_from, -1);
  EXPECT_EQ(pipe_links(3, 0, 2, {PipeOp::backward, 0, 1}).send_to, 2);  // part 3's input gradient to part 2
  EXPECT_EQ(pipe_links(3, 0, 2, {PipeOp::backward, 0, 0}).send_to, -1);
  EXPECT_EQ(pipe_links(3, 1, 2, {PipeOp::backward, 0, 0}).receive_from, 2);
}

// Every stage runs its schedule as Pipeline::run does: post the receive and
// wait for it, take a send buffer (waiting for the send still in it), post
// the send. The transport is the strictest the HAL allows: operations on
// one communicator run one at a time in posting order, and a send and its
// receive complete together, only when both are at the front of their
// ranks' queues. `wrap` false puts wrapping links on the two plain
// communicators, as a pipeline without wrap communicators would. Returns
// false if the stages stop with work left.
bool schedule_completes(uint32_t stages, uint32_t chunks, uint32_t micro, bool wrap = true) {
  struct Op {
    bool send = false;
    uint32_t peer = 0;
    bool done = false;
  };
  using Queue = std::deque<std::shared_ptr<Op>>;
  std::map<std::pair<uint32_t, int>, Queue> queues;  // (stage, communicator)
  const auto comm_of = [&](PipeOp op, bool wraps) {
    return (op == PipeOp::forward ? 0 : 1) + (wrap && wraps ? 2 : 0);
  };
  struct Stage {
    std::vector<PipeStep> steps;
    size_t at = 0;
    std::shared_ptr<Op> receiving;
    bool received = false;
    std::vector<std::shared_ptr<Op>> ring[2];
    size_t next[2] = {0, 0};
  };
  std::vector<Stage> st(stages);
  for (uint32_t s = 0; s < stages; ++s) {
    st[s].steps = schedule_interleaved(stages, s, chunks, micro);
    st[s].ring[0].resize(pipe_send_slots(stages, s, chunks, micro, PipeOp::forward));
    st[s].ring[1].resize(pipe_send_slots(stages, s, chunks, micro, PipeOp::backward));
  }
  const auto post = [&](uint32_t s, int comm, bool send, uint32_t peer) {
    auto op = std::make_shared<Op>(Op{send, peer, false});
    queues[{s, comm}].push_back(op);
    return op;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (auto& [key, q] : queues) {  // a send meets its receive at the front of both queues
      if (q.empty() || !q.front()->send) continue;
      Queue& other = queues[{q.front()->peer, key.second}];
      if (other.empty() || other.front()->send || other.front()->peer != key.first) continue;
      q.front()->done = other.front()->done = true;
      q.pop_front();
      other.pop_front();
      moved = true;
    }
    for (uint32_t s = 0; s < stages; ++s) {
      Stage& me = st[s];
      while (me.at < me.steps.size()) {
        const PipeStep& step = me.steps[me.at];
        const PipeLinks l = pipe_links(stages, s, chunks, step);
        if (l.receive_from >= 0 && !me.received) {
          if (!me.receiving)
            me.receiving =
                post(s, comm_of(step.op, l.receive_wraps), false, static_cast<uint32_t>(l.receive_from));
          if (!me.receiving->done) break;
          me.receiving.reset();
          me.received = true;
        }
        if (l.send_to >= 0) {
          const int dir = step.op == PipeOp::forward ? 0 : 1;
          auto& slot = me.ring[dir][me.next[dir] % me.ring[dir].size()];
          if (slot && !slot->done) break;
          slot = post(s, comm_of(step.op, l.send_wraps), true, static_cast<uint32_t>(l.send_to));
          ++me.next[dir];
        }
        me.received = false;
        ++me.at;
        moved = true;
      }
    }
  }
  for (const Stage& s : st)
    if (s.at < s.steps.size()) return false;
  return true;
}

TEST(ScheduleInterleaved, NoStageWaitsForeverEvenWhenSendsCompleteOnlyOnReceipt) {
  for (uint32_t stages = 2; stages <= 8; ++stages)
    for (uint32_t chunks = 1; chunks <= 4; ++chunks)
      for (uint32_t micro : {stages, 2 * stages, 3 * stages, 8 * stages})
        EXPECT_TRUE(schedule_completes(stages, chunks, micro))
            << stages << " stages, " << chunks << " chunks, " << micro << " micro-batches";
  // Why the wrap communicators exist: without them every interleaved
  // schedule waits on itself; plain 1F1B never wraps.
  EXPECT_FALSE(schedule_completes(4, 2, 8, /*wrap=*/false));
  EXPECT_TRUE(schedule_completes(4, 1, 8, /*wrap=*/false));
}

// Each model part's gradient (grad-PART) equals the unpipelined model's
// bit for bit, and the stages' measured bubble is the schedule's (every
// stage computes 4 ms forward and 8 ms backward per micro-batch): each
// stage's is a fraction, and their mean lies between 0.3 x the ideal (a
// stage's own span starts and ends with its own work, so later stages idle
// less than the pipeline does) and the ideal + 0.5 (the exchanges' share on
// a loaded two-core machine, sanitizers included). A bubble of 0 or 1 fails it.
void expect_reference_gradients(const std::string& dir, uint32_t parts, uint32_t stages, double ideal) {
  const auto want = test::reference_gradients(parts, 8);
  for (uint32_t part = 0; part < parts; ++part) {
    const auto got = test::read_bytes(dir + "/grad-" + std::to_string(part));
    ASSERT_EQ(got.size(), want[part].size() * sizeof(float)) << "part " << part;
    EXPECT_EQ(std::memcmp(got.data(), want[part].data(), got.size()), 0) << "part " << part << " differs";
  }
  double mean = 0;
  for (uint32_t s = 0; s < stages; ++s) {
    std::ifstream b(dir + "/bubble-" + std::to_string(s));
    double bubble = -1;
    b >> bubble;
    EXPECT_GT(bubble, 0) << "stage " << s;
    EXPECT_LT(bubble, 1) << "stage " << s;
    mean += bubble / stages;
    std::printf("stage %u: measured bubble %.2f (the schedule's ideal %.2f)\n", s, bubble, ideal);
  }
  EXPECT_GE(mean, 0.3 * ideal) << "the stages idle less than the schedule allows";
  EXPECT_LE(mean, ideal + 0.5) << "the stages idle far more than the schedule";
}

TEST(Pipeline, FourStageGradientsEqualTheUnpipelinedModelBitwise) {
  expect_reference_gradients(test::run_ranks(SIGMA_PARALLEL_WORKER, "pipe", 4), 4, 4,
                             bubble_fraction_1f1b(4, 8));
}

TEST(Pipeline, InterleavedFourStagesTwoChunksEqualTheUnpipelinedModelBitwise) {
  expect_reference_gradients(test::run_ranks(SIGMA_PARALLEL_WORKER, "pipe_interleaved", 4), 8, 4,
                             bubble_fraction_interleaved(4, 2, 8));
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
  // Fast means before the pipeline's 20 s timeout could have fired: the
  // dead peer's socket ends the survivors' exchanges (start-up included).
  EXPECT_LT(seconds, 20) << "the survivors waited for the timeout instead of seeing the dead peer";
}

}  // namespace
}  // namespace sigma::parallel
