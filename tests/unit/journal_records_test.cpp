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
#include <type_traits>

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
  const Line l = decode(stamped(encode(Launch{2, {}, 77})));
  EXPECT_EQ(l.event, Event::launch);
  EXPECT_DOUBLE_EQ(l.t, 1.5);
  EXPECT_EQ(std::get<Launch>(l.record), (Launch{2, {}, 77}));
}

// One record of every kind: each is written under its kind's name and
// reads back equal, and no kind is left without a record type.
TEST(JournalRecords, EveryKindHasARecordThatReadsBackEqual) {
  std::set<Event> kinds;
  auto round_trip = [&](const auto& r) {
    using R = std::decay_t<decltype(r)>;
    const json written = encode(r);
    const Line l = decode(stamped(written));
    EXPECT_EQ(name(l.event), written["event"].get<std::string>());
    ASSERT_TRUE(std::holds_alternative<R>(l.record)) << written.dump();
    EXPECT_TRUE(std::get<R>(l.record) == r) << written.dump();
    kinds.insert(l.event);
  };
  Start s;
  s.nproc = 2;
  s.worker = json::array({"./w"});
  round_trip(s);
  round_trip(Fault{3, -1, "spare", "killed", 0.25});
  for (Event e : {Event::health_state, Event::warning, Event::warning_cleared}) {
    Health h;
    h.kind = e;
    h.device = 1;
    if (e == Event::health_state) h.to = "suspect";
    round_trip(h);
  }
  round_trip(RecoveryStarted{"x", {}});
  round_trip(Scheduler{"replace", "crashed", 1, 1, 4, "", 4});
  round_trip(Readmit{2, "crashed", 1, 3});
  round_trip(StorageFailed{0, 0, 40, "disk full"});
  round_trip(End{"done", "all steps", {}});
  round_trip(End{{}, {}, 4});
  for (Event e : {Event::stopped, Event::paused, Event::unrecoverable, Event::done_without_session})
    round_trip(JobEnded{e, "why"});
  round_trip(Resumed{40, "job/checkpoints"});
  round_trip(StopRequested{"SIGTERM"});
  round_trip(Numerics{12, "skipped: overflow"});
  round_trip(Launch{1, 0u, 4242});
  round_trip(Validated{1, false, "ecc"});
  round_trip(ProcessExit{Event::exit, 1, "killed by signal 9"});
  round_trip(ProcessExit{Event::exited_without_session, 1, "exited with status 0"});
  round_trip(Assigned{2, "memory", 18, {{2, 1}, {0, 3}}, {0, 4, 2, 3}, {0, 0, 1, 1}, "node"});
  round_trip(RecoveryOverdue{2, 1});
  round_trip(Rejoined{2, 1.25, 3});
  round_trip(Recovered{21, 1.5});
  round_trip(MigrationStarted{1, 1, 30});
  round_trip(Stalled{7, 5, "every rank is in the same step"});
  for (Event e : {Event::node_joined, Event::node_lost, Event::joined_root}) round_trip(NodeEvent{e, 1});
  round_trip(BadMessage{2, {}, "not JSON", json{{"type", "x"}}});
  round_trip(BadMessage{{}, 1, "bad", "text"});
  round_trip(RefusedConnection{"version 1", json{{"type", "hello"}}});
  round_trip(RefusedEnv{3, {"LD_PRELOAD"}});
  round_trip(Goodbye{0, "the job is done"});
  round_trip(RootLost{});
  for (int k = 1; k <= static_cast<int>(Event::done_without_session); ++k)
    EXPECT_TRUE(kinds.count(static_cast<Event>(k))) << name(static_cast<Event>(k)) << " has no record here";
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
  refused({{"event", "assigned"}, {"t", 1}, {"generation", 2}, {"handoff", {{1, 2, 3}}}},
          "handoff: an element is not a [holder, receiver] pair");
  refused({{"event", "assigned"}, {"t", 1}, {"generation", 2}, {"devices", {0, -1}}},
          "devices: missing or not a whole number");
  refused({{"event", "refused_env"}, {"t", 1}, {"device", 0}, {"names", {"A", 2}}},
          "names: an element is not a string");
  refused({{"event", "node_lost"}, {"t", 1}}, "node: missing or not a whole number");
  refused({{"event", "end"}, {"t", 1}, {"code", "4"}}, "code: missing or not an integer");
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
// before the device failed. Every line reads as a record of a kind this
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
      EXPECT_FALSE(std::holds_alternative<std::monostate>(l.record)) << file << ":" << lines + 1;
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
