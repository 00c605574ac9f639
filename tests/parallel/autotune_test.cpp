// The autotuner on real processes: four ranks on the sim vendor, whose
// scenario slows rank 2's link 4x for a while. The experts of rank 2 must
// move off within trigger_steps of its link retries showing, come back
// recover_steps after they stop, move nothing else, and every step's
// output must be bitwise what the same run gives on the cpu vendor with no
// slow link and no move: a placement changes nothing but where experts run.
#include "ranks.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace {

using json = nlohmann::json;

std::vector<json> lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(json::parse(l));
  return out;
}

std::string text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(Autotune, ExpertsLeaveASlowLinkAndComeBackWithBitwiseTheSameResults) {
  const std::string slow = sigma::test::run_ranks(
      SIGMA_PARALLEL_WORKER, "autotune", 4, std::chrono::seconds(120), nullptr, [](const std::string& dir) {
        std::ofstream(dir + "/scenario.yaml") << "seed: 1\nduration_s: 600\nworld_size: 4\nfaults:\n"
                                                 "  - {kind: slow_link, device: 2, at_s: 1.5, "
                                                 "duration_s: 2.5, factor: 4}\n";
      });
  // The baseline never asks the balancer: the cpu vendor's link retries are
  // the host's TCP retransmissions, which other processes can raise.
  const std::string clean =
      sigma::test::run_ranks(SIGMA_PARALLEL_WORKER, "autotune", 4, std::chrono::seconds(120), nullptr,
                             [](const std::string& dir) { std::ofstream(dir + "/no-autotune"); });
  const auto samples = lines(slow + "/samples.jsonl");
  const auto moves = lines(slow + "/rebalances.jsonl");
  ASSERT_EQ(samples.size(), 200u);
  // Steps where rank 2's link retried (the balancer's threshold is 20/s).
  int64_t first_slow = -1, last_slow = -1;
  for (const auto& s : samples)
    if (s["retries_per_s"][2].get<double>() >= 20) {
      if (first_slow < 0) first_slow = s["step"].get<int64_t>();
      last_slow = s["step"].get<int64_t>();
    }
  ASSERT_GE(first_slow, 0) << "the sim vendor never reported rank 2's link retrying";
  ASSERT_EQ(moves.size(), 2u) << text(slow + "/rebalances.jsonl");
  // Off on the third slow step in a row, every expert of rank 2.
  EXPECT_EQ(moves[0]["step"].get<int64_t>(), first_slow + 2) << moves[0].dump();
  for (const auto& m : moves[0]["moves"]) EXPECT_EQ(m["from"].get<int>(), 2) << moves[0].dump();
  EXPECT_EQ(moves[0]["moves"].size(), 2u);
  EXPECT_NE(moves[0]["reason"].get<std::string>().find("rank 2 slow"), std::string::npos);
  // Back on the 20th healthy step after the last slow one.
  EXPECT_EQ(moves[1]["step"].get<int64_t>(), last_slow + 20) << moves[1].dump();
  EXPECT_EQ(moves[1]["owner"], json::parse("[0,0,1,1,2,2,3,3]"));
  for (uint32_t r = 0; r < 4; ++r) {
    const std::string a = text(slow + "/out-" + std::to_string(r) + ".txt"),
                      b = text(clean + "/out-" + std::to_string(r) + ".txt");
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "rank " << r << ": the outputs changed with the placement";
  }
}

}  // namespace
