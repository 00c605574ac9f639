// The root agent's inbound tally (pure logic: read from src/): messages by
// source and type, bytes by source, rates over the wall time.
#include "runtime/agent/inbound.hpp"

#include <gtest/gtest.h>

namespace sigma::runtime::agent {
namespace {

TEST(Inbound, CountsMessagesBySourceAndTypeAndRatesThemOverTheWallTime) {
  Inbound in;
  for (int i = 0; i < 30; ++i) in.message(Inbound::Source::worker, "heartbeat");
  for (int i = 0; i < 10; ++i) in.message(Inbound::Source::worker, "step");
  in.message(Inbound::Source::node_agent, "launched");
  in.message(Inbound::Source::worker, "");
  in.message(Inbound::Source::worker, std::string(1000, 'x') + "\"}");
  in.bytes(Inbound::Source::worker, 4000);
  in.bytes(Inbound::Source::node_agent, 100);
  EXPECT_EQ(in.messages(), 43u);
  const auto j = in.to_json(2.0);
  EXPECT_EQ(j["messages"], 43);
  EXPECT_EQ(j["bytes"], 4100);
  EXPECT_DOUBLE_EQ(j["messages_per_s"].get<double>(), 21.5);
  EXPECT_DOUBLE_EQ(j["bytes_per_s"].get<double>(), 2050.0);
  EXPECT_EQ(j["by_source"]["workers"]["messages"], 42);
  EXPECT_EQ(j["by_source"]["workers"]["bytes"], 4000);
  EXPECT_EQ(j["by_source"]["node_agents"]["messages"], 1);
  EXPECT_EQ(j["by_type"]["heartbeat"], 30);
  EXPECT_EQ(j["by_type"]["step"], 10);
  EXPECT_EQ(j["by_type"]["launched"], 1);
  // Still load, but a peer's words never name a series: without a type
  // or with one no peer sends, a message is "other".
  EXPECT_EQ(j["by_type"]["other"], 2);
  EXPECT_EQ(j["by_type"].size(), 4u);
}

TEST(Inbound, NoWallTimeGivesNoRateAndNothingReadGivesZeros) {
  const auto j = Inbound{}.to_json(0);
  EXPECT_EQ(j["messages"], 0);
  EXPECT_EQ(j["messages_per_s"], 0.0);
  EXPECT_TRUE(j["by_source"].empty());
  EXPECT_TRUE(j["by_type"].empty());
}

}  // namespace
}  // namespace sigma::runtime::agent
