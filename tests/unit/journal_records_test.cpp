// The incident journal's kinds and records (pure: read from src/): every
// kind has one name, every record reads back as it was written, a field of
// the wrong type is named, and journals written before the records existed
// (tests/data/journals/, by an earlier build) read and replay.
#include "journal_records.hpp"

#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace sigma::journal {
namespace {

using nlohmann::json;

json stamped(json j) {
  j["t"] = 1.5;
  return j;
}

TEST(JournalRecords, EveryKindHasOneNameThatReadsBack) {
  std::set<std::string> names;
  for (int k = 0; k <= static_cast<int>(Event::done_without_session); ++k) {
    const auto e = static_cast<Event>(k);
    const std::string n = name(e);
    EXPECT_TRUE(names.insert(n).second) << "two kinds named " << n;
    EXPECT_EQ(event_named(n), e) << n;
  }
  EXPECT_EQ(event_named("a_kind_from_a_newer_build"), Event::unknown);
  const Line l = decode(stamped(line(Event::launch, {{"device", 2}, {"pid", 77}})));
  EXPECT_EQ(l.event, Event::launch);
  EXPECT_DOUBLE_EQ(l.t, 1.5);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(l.record));
}

TEST(JournalRecords, EachRecordReadsBackAsItWasWritten) {
  Start s;
  s.job_id = "j";
  s.nproc = 4;
  s.spares = 1;
  s.nnodes = 2;
  s.nodes_per_group = 1;
  s.min_world = 3;
  s.snapshot_every = 5;
  s.checkpoint_every = 50;
  s.proactive_migration = false;
  s.allow_shrink = true;
  s.vendor = "sim";
  s.worker = json::array({"./train", "--steps", "10"});
  const auto rs = std::get<Start>(decode(stamped(encode(s))).record);
  EXPECT_EQ(rs.nproc, 4u);
  EXPECT_EQ(rs.nnodes, 2u);
  EXPECT_EQ(rs.min_world, 3u);
  EXPECT_EQ(rs.snapshot_every, 5u);
  EXPECT_FALSE(rs.proactive_migration);
  EXPECT_TRUE(rs.allow_shrink);
  EXPECT_EQ(rs.worker, s.worker);

  const auto f = std::get<Fault>(decode(stamped(encode(Fault{3, -1, "spare", "killed", 0.25}))).record);
  EXPECT_EQ(f.device, 3u);
  EXPECT_EQ(f.rank, -1);
  EXPECT_EQ(f.cause, "killed");
  EXPECT_DOUBLE_EQ(f.detected_after_s, 0.25);

  Health h;
  h.device = 1;
  h.from = "healthy";
  h.to = "suspect";
  h.rule = "temperature_slope";
  h.message = "heating";
  h.eta_s = 12;
  const auto rh = std::get<Health>(decode(stamped(encode(h))).record);
  EXPECT_EQ(rh.kind, Event::health_state);
  EXPECT_EQ(rh.to, "suspect");
  EXPECT_EQ(rh.rule, "temperature_slope");
  ASSERT_TRUE(rh.eta_s.has_value());
  EXPECT_DOUBLE_EQ(*rh.eta_s, 12);
  h.kind = Event::warning;
  EXPECT_EQ(decode(stamped(encode(h))).event, Event::warning);

  Scheduler a;
  a.action = "replace";
  a.device = 1;
  a.rank = 1;
  a.to_device = 4;
  a.world_size = 4;
  const auto ra = std::get<Scheduler>(decode(stamped(encode(a))).record);
  EXPECT_EQ(ra.action, "replace");
  EXPECT_EQ(ra.to_device, std::optional<uint32_t>(4));
  EXPECT_EQ(ra.world_size, 4u);
  EXPECT_FALSE(
      std::get<Scheduler>(decode(stamped(encode(Scheduler{"restore", "", {}, {}, {}, "memory", 0}))).record)
          .device.has_value());

  EXPECT_EQ(std::get<RecoveryStarted>(decode(stamped(encode(RecoveryStarted{"x", 18}))).record).reached_step,
            std::optional<uint64_t>(18));
  EXPECT_EQ(std::get<Readmit>(decode(stamped(encode(Readmit{2, "crashed", 1, 3}))).record).of, 3u);
  EXPECT_EQ(
      std::get<StorageFailed>(decode(stamped(encode(StorageFailed{0, 0, 40, "disk full"}))).record).index,
      40u);
}

TEST(JournalRecords, AFieldOfTheWrongTypeIsNamed) {
  auto refused = [](const json& j, const std::string& want) {
    try {
      decode(j);
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused(json::array(), "(line): not a JSON object");
  refused({{"t", 1}}, "event: missing or not a string");
  refused({{"event", "fault"}, {"device", 1}}, "t: missing or not a number");
  refused({{"event", "fault"}, {"t", 1}, {"device", "1"}}, "device: missing or not a whole number");
  refused({{"event", "scheduler"}, {"t", 1}, {"action", "replace"}, {"to_device", -2}},
          "to_device: missing or not a whole number");
  refused({{"event", "health_state"}, {"t", 1}, {"device", 1}}, "to: missing or not a string");
  refused({{"event", "start"}, {"t", 0}, {"nproc", 1}, {"spares", 0}, {"nnodes", 1}, {"allow_shrink", "yes"}},
          "allow_shrink: not true or false");
  // A kind this build does not know, or a field a later writer added, is read past.
  EXPECT_EQ(decode({{"event", "from_the_future"}, {"t", 2}, {"x", {1, 2}}}).event, Event::unknown);
  EXPECT_NO_THROW(decode({{"event", "fault"}, {"t", 2}, {"device", 0}, {"new_field", true}}));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Journals an earlier build wrote (2026-12-03, before the records): a
// trainer job with a crash and a slow link, and a thermal runaway migrated
// before the device failed. Every line reads, of a kind this
// build knows, and the simulator replays each with the agent's decisions.
TEST(JournalRecords, JournalsAnEarlierBuildWroteReadAndReplay) {
  for (const char* file : {"moe-crash-slow-link.jsonl", "thermal-migration.jsonl"}) {
    const std::string text = read_file(std::string(SIGMA_SOURCE_DIR) + "/tests/data/journals/" + file);
    ASSERT_FALSE(text.empty()) << file;
    std::istringstream in(text);
    size_t lines = 0;
    std::set<Event> kinds;
    for (std::string raw; std::getline(in, raw); ++lines) {
      const Line l = decode(json::parse(raw));
      EXPECT_NE(l.event, Event::unknown) << file << ":" << lines + 1 << ": " << raw;
      kinds.insert(l.event);
    }
    EXPECT_GT(lines, 20u);
    EXPECT_TRUE(kinds.count(Event::start) && kinds.count(Event::scheduler) && kinds.count(Event::end))
        << file;
    const auto replay = sim::parse_journal(text, file);
    EXPECT_GT(replay.faults + replay.health_changes, 0u) << file;
    ASSERT_FALSE(replay.journalled.empty()) << file;
    const auto res = sim::run(replay.scenario);
    EXPECT_EQ(sim::compare_decisions(replay.journalled, res.policies.at(0).decisions), "") << file;
  }
}

}  // namespace
}  // namespace sigma::journal
