// The agent protocol: every message kind survives encode -> decode, a
// malformed message is refused naming its kind and field, and a peer of
// another version is refused by name.
#include "runtime/protocol.hpp"
#include "runtime/agent/launcher.hpp"

#include <sigma/error.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <csignal>

namespace sigma::runtime::protocol {
namespace {

using json = nlohmann::json;

// Decoding throws Error(invalid_argument) whose message holds every one of
// `words`.
template <class Decode>
void expect_refused(Decode decode, const json& j, std::initializer_list<const char*> words) {
  try {
    decode(j);
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument) << e.what();
    for (const char* w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST(Protocol, EveryWorkerMessageRoundTrips) {
  Heartbeat hb;
  hb.step = 41;
  hb.step_done = true;
  hal_telemetry_sample_t t{};
  t.id = HAL_FIELD_TEMPERATURE_C;
  t.type = HAL_VALUE_F64;
  t.value.f64 = 71.25;
  hal_telemetry_sample_t e{};
  e.id = HAL_FIELD_ECC_CORRECTABLE;
  e.type = HAL_VALUE_U64;
  e.value.u64 = 1ull << 60;
  hal_telemetry_sample_t p{};
  p.id = 0x80000001u;
  p.type = HAL_VALUE_I64;
  p.status = HAL_ERR_NOT_SUPPORTED;
  p.value.i64 = -5;
  hb.telemetry = {t, e, p};
  const Heartbeat back = std::get<Heartbeat>(decode_worker(encode(WorkerMessage{hb})));
  EXPECT_EQ(back.step, 41);
  EXPECT_TRUE(back.step_done);
  ASSERT_EQ(back.telemetry.size(), 3u);
  EXPECT_EQ(back.telemetry[0].id, HAL_FIELD_TEMPERATURE_C);
  EXPECT_EQ(back.telemetry[0].value.f64, 71.25);
  EXPECT_EQ(back.telemetry[1].value.u64, 1ull << 60);
  EXPECT_EQ(back.telemetry[2].status, HAL_ERR_NOT_SUPPORTED);
  EXPECT_EQ(back.telemetry[2].type, HAL_VALUE_I64);
  EXPECT_EQ(back.telemetry[2].value.i64, -5);
  EXPECT_EQ(back.telemetry_status, HAL_OK);

  const Hello h = std::get<Hello>(decode_worker(encode(WorkerMessage{Hello{kVersion, 3, 77, true, "fine"}})));
  EXPECT_EQ(h.version, kVersion);
  EXPECT_EQ(h.device, 3u);
  EXPECT_EQ(h.pid, 77);
  EXPECT_TRUE(h.self_test_passed);
  EXPECT_EQ(h.self_test_detail, "fine");

  const Joined j = std::get<Joined>(
      decode_worker(encode(WorkerMessage{Joined{4, 2, 60, RestoreTier::memory, 0.5, 0.25, 1.5}})));
  EXPECT_EQ(j.generation, 4u);
  EXPECT_EQ(j.rank, 2u);
  EXPECT_EQ(j.index, 60u);
  EXPECT_STREQ(name(j.restore), "memory");
  EXPECT_EQ(j.restore_s, 1.5);

  const RecoverRequest r = std::get<RecoverRequest>(decode_worker(
      encode(WorkerMessage{RecoverRequest{Code::device_lost, "device_lost: gone", 3, {5, 6}, {4}, {}}})));
  EXPECT_EQ(r.code, Code::device_lost);
  // A failure libsigma did not report travels as "unknown" and comes back as none.
  const json unknown = encode(WorkerMessage{RecoverRequest{std::nullopt, "my own error", 3, {}, {}, {}}});
  EXPECT_EQ(unknown["code"], "unknown");
  EXPECT_FALSE(std::get<RecoverRequest>(decode_worker(unknown)).code.has_value());
  EXPECT_EQ(r.reason, "device_lost: gone");
  EXPECT_EQ(r.own, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(r.replica, (std::vector<uint64_t>{4}));
  EXPECT_TRUE(r.disk.empty());

  EXPECT_EQ(std::get<StepDone>(decode_worker(encode(WorkerMessage{StepDone{9, 0.125}}))).seconds, 0.125);
  EXPECT_EQ(std::get<Snapshotted>(decode_worker(encode(WorkerMessage{Snapshotted{10}}))).index, 10u);
  EXPECT_EQ(std::get<Checkpointed>(decode_worker(encode(WorkerMessage{Checkpointed{20}}))).index, 20u);
  EXPECT_EQ(std::get<Done>(decode_worker(encode(WorkerMessage{Done{160}}))).steps, 160u);
  const StorageFailed sf =
      std::get<StorageFailed>(decode_worker(encode(WorkerMessage{StorageFailed{40, "disk full"}})));
  EXPECT_EQ(sf.index, 40u);
  EXPECT_EQ(sf.reason, "disk full");
  EXPECT_EQ(std::get<Refused>(decode_worker(encode(WorkerMessage{Refused{"too big"}}))).reason, "too big");
}

TEST(Protocol, ReplicasTravelByTheRankWhoseTheyAreAndAnOlderWorkersDoNot) {
  RecoverRequest r{Code::aborted, "peer lost", 2, {9, 10}, {9, 10}, {}};
  r.replicas_of = std::map<uint32_t, std::vector<uint64_t>>{{2, {9, 10}}, {5, {10}}};
  const RecoverRequest back = std::get<RecoverRequest>(decode_worker(encode(WorkerMessage{r})));
  ASSERT_TRUE(back.replicas_of.has_value());
  EXPECT_EQ(*back.replicas_of, *r.replicas_of);
  json old = encode(WorkerMessage{r});
  old.erase("replicas_of");
  EXPECT_FALSE(std::get<RecoverRequest>(decode_worker(old)).replicas_of.has_value());
  json twice = encode(WorkerMessage{r});
  twice["replicas_of"].push_back({{"of", 2}, {"steps", json::array()}});
  expect_refused(decode_worker, twice, {"recover.replicas_of", "rank 2 listed twice"});
}

TEST(Protocol, AnAssignmentCarriesTheDomainsItsReplicasArePlacedAcross) {
  Assign a{1, 4, 2, RestoreTier::memory, 60, {{0, 2}}};
  a.domains = {0, 0, 2, 2};
  a.replicas = 2;
  a.host_ranks = 4;
  const Assign back = std::get<Assign>(decode_agent(encode(AgentMessage{a})));
  EXPECT_EQ(back.domains, a.domains);
  EXPECT_EQ(back.replicas, 2u);
  EXPECT_EQ(back.host_ranks, 4u);
  // An older agent's assignment: the ring, one replica, no memory check.
  json old = encode(AgentMessage{a});
  for (const char* k : {"domains", "replicas", "host_ranks"}) old.erase(k);
  const Assign ring = std::get<Assign>(decode_agent(old));
  EXPECT_TRUE(ring.domains.empty());
  EXPECT_EQ(ring.replicas, 1u);
  EXPECT_EQ(ring.host_ranks, 0u);
  json short_of = encode(AgentMessage{a});
  short_of["domains"] = {0, 1};
  expect_refused(decode_agent, short_of, {"assign.domains", "2 domains for a world of 4 ranks"});
  json three = encode(AgentMessage{a});
  three["replicas"] = 3;
  expect_refused(decode_agent, three, {"assign.replicas", "expected 1 or 2"});
}

TEST(Protocol, AContainedAssignmentCarriesEveryRanksReplicaAndTheLiveSet) {
  Assign a{3, 4, 2, RestoreTier::peer, 0, {}};
  a.replica_of = {0, 0, 1, 1};
  a.epoch = 5;
  a.live = {0};
  a.contained = true;
  const Assign back = std::get<Assign>(decode_agent(encode(AgentMessage{a})));
  EXPECT_EQ(back.restore, RestoreTier::peer);
  EXPECT_EQ(back.replica_of, a.replica_of);
  EXPECT_EQ(back.contained, a.contained);
  EXPECT_EQ(back.epoch, 5u);
  EXPECT_EQ(back.live, (std::vector<uint32_t>{0}));
  // Exact mode's assignment has none of it on the wire.
  EXPECT_FALSE(encode(AgentMessage{Assign{1, 4, 2, RestoreTier::memory, 60, {}}}).contains("replica_of"));
  json uneven = encode(AgentMessage{a});
  uneven["replica_of"] = {0, 0, 0, 1};
  expect_refused(decode_agent, uneven, {"assign.replica_of", "replicas of different sizes"});
  json short_of = encode(AgentMessage{a});
  short_of["replica_of"] = {0, 1};
  expect_refused(decode_agent, short_of, {"assign.replica_of", "2 replicas for a world of 4 ranks"});
  json huge = encode(AgentMessage{a});
  huge["replica_of"] = {0, 0, 4294967295u, 4294967295u};
  expect_refused(decode_agent, huge, {"assign.replica_of", "replica 4294967295 in a world of 4 ranks"});
  json outside = encode(AgentMessage{a});
  outside["live"] = {0, 2};
  expect_refused(decode_agent, outside, {"assign.live", "replica 2 of 2"});
  json none = encode(AgentMessage{a});
  none["live"] = json::array();
  expect_refused(decode_agent, none, {"assign.live", "no live replica"});
}

TEST(Protocol, AReformIsAtOnceOrAHandOffWithItsDonorAndBoundary) {
  const Reform now = std::get<Reform>(decode_agent(encode(AgentMessage{Reform{4, {0, 2}}})));
  EXPECT_EQ(now.epoch, 4u);
  EXPECT_EQ(now.live, (std::vector<uint32_t>{0, 2}));
  EXPECT_FALSE(now.boundary.has_value());
  const Reform handoff{5, {0, 1, 2}, {1}, 0u, 22u};
  const json wire = encode(AgentMessage{handoff});
  const Reform back = std::get<Reform>(decode_agent(wire));
  EXPECT_EQ(back.rejoining, (std::vector<uint32_t>{1}));
  EXPECT_EQ(back.donor, 0u);
  EXPECT_EQ(back.boundary, 22u);
  json unsorted = wire;
  unsorted["live"] = {2, 0, 1};
  expect_refused(decode_agent, unsorted, {"reform.live", "ascending"});
  json donor_rejoins = wire;
  donor_rejoins["donor"] = 1;
  expect_refused(decode_agent, donor_rejoins, {"reform.donor", "not a live replica staying"});
  json outside = wire;
  outside["rejoining"] = {3};
  expect_refused(decode_agent, outside, {"reform.rejoining", "replica 3 is not in the live set"});
  json no_donor = wire;
  no_donor.erase("donor");
  expect_refused(decode_agent, no_donor, {"reform.donor", "missing"});
  const Reformed r = std::get<Reformed>(decode_worker(encode(WorkerMessage{Reformed{5}})));
  EXPECT_EQ(r.epoch, 5u);
  // A hand-off places the memory tier anew: every rank's domain travels.
  Reform placed = handoff;
  placed.domains = {0, 0, 2, 2, 1, 1};
  EXPECT_EQ(std::get<Reform>(decode_agent(encode(AgentMessage{placed}))).domains, placed.domains);
  EXPECT_TRUE(back.domains.empty()) << "absent: unchanged";
  json bad_domains = encode(AgentMessage{placed});
  bad_domains["domains"] = {0, "node"};
  expect_refused(decode_agent, bad_domains, {"reform.domains"});
}

TEST(Protocol, AStepsFiguresAreOptionalAndANonFiniteLossTravelsAsNull) {
  const StepDone plain = std::get<StepDone>(decode_worker(encode(WorkerMessage{StepDone{9, 0.125}})));
  EXPECT_FALSE(plain.loss.has_value());
  EXPECT_EQ(plain.tokens, 0u);
  EXPECT_TRUE(plain.note.empty());
  StepDone full{12, 0.5, 2.25, 4096, 1e12, 4e11, "skipped: 3 non-finite values"};
  const StepDone back = std::get<StepDone>(decode_worker(encode(WorkerMessage{full})));
  EXPECT_EQ(back.loss, 2.25);
  EXPECT_EQ(back.tokens, 4096u);
  EXPECT_EQ(back.flops, 1e12);
  EXPECT_EQ(back.peak_flops, 4e11);
  EXPECT_EQ(back.note, "skipped: 3 non-finite values");
  full.loss = std::nan("");
  const json wire = encode(WorkerMessage{full});
  EXPECT_TRUE(wire.at("loss").is_null()) << wire.dump();
  const StepDone nan_back = std::get<StepDone>(decode_worker(wire));
  ASSERT_TRUE(nan_back.loss.has_value());
  EXPECT_TRUE(std::isnan(*nan_back.loss));
  json bad = wire;
  bad["tokens"] = "many";
  EXPECT_THROW(decode_worker(bad), sigma::Error);
}

TEST(Protocol, AFailedTelemetryReadTravelsAsAnErrorNotASample) {
  Heartbeat hb;
  hb.telemetry_status = HAL_ERR_DEVICE_LOST;
  hb.telemetry_error = "sim: device 0 is lost";
  const json j = encode(WorkerMessage{hb});
  EXPECT_TRUE(j["telemetry"].empty());
  const Heartbeat back = std::get<Heartbeat>(decode_worker(j));
  EXPECT_EQ(back.telemetry_status, HAL_ERR_DEVICE_LOST);
  EXPECT_EQ(back.telemetry_error, "sim: device 0 is lost");
  json bad = j;
  bad["telemetry_error"]["status"] = 0;
  expect_refused(decode_worker, bad, {"heartbeat.telemetry_error.status", "error status"});
}

TEST(Protocol, EveryAgentNodeAndRootMessageRoundTrips) {
  const Assign a = std::get<Assign>(
      decode_agent(encode(AgentMessage{Assign{1, 3, 7, RestoreTier::memory, 60, {{2, 1}, {0, 2}}}})));
  EXPECT_EQ(a.rank, 1u);
  EXPECT_EQ(a.world, 3u);
  EXPECT_EQ(a.generation, 7u);
  EXPECT_STREQ(name(a.restore), "memory");
  EXPECT_EQ(a.index, 60u);
  EXPECT_EQ(a.handoff, (std::vector<std::pair<uint32_t, uint32_t>>{{2, 1}, {0, 2}}));
  EXPECT_TRUE(a.refresh.empty());
  EXPECT_FALSE(encode(AgentMessage{a}).contains("refresh")) << "absent when there is none";
  Assign r = a;
  r.refresh = {{0, 1}, {2, 0}};
  EXPECT_EQ(std::get<Assign>(decode_agent(encode(AgentMessage{r}))).refresh, r.refresh);
  json bad = encode(AgentMessage{r});
  bad["refresh"] = json::array({json::array({1, 1})});
  expect_refused(decode_agent, bad, {"assign.refresh", "[1, 1] in a world of 3 ranks"});
  EXPECT_EQ(std::get<Abort>(decode_agent(encode(AgentMessage{Abort{"rank 1 died"}}))).reason, "rank 1 died");
  EXPECT_EQ(std::get<Retire>(decode_agent(encode(AgentMessage{Retire{"cordoned"}}))).reason, "cordoned");
  EXPECT_EQ(std::get<StopAfter>(decode_agent(encode(AgentMessage{StopAfter{12}}))).step, 12);
  EXPECT_EQ(std::get<Goodbye>(decode_agent(encode(AgentMessage{Goodbye{"done"}}))).reason, "done");

  const NodeHello n = std::get<NodeHello>(decode_node(encode(NodeMessage{NodeHello{kVersion, 2, 99}})));
  EXPECT_EQ(n.node, 2u);
  EXPECT_TRUE(n.rack.empty());
  EXPECT_EQ(std::get<NodeHello>(decode_node(encode(NodeMessage{NodeHello{kVersion, 2, 99, "leaf3"}}))).rack,
            "leaf3");
  EXPECT_EQ(std::get<Launched>(decode_node(encode(NodeMessage{Launched{5, 1234}}))).pid, 1234);
  for (const ProcessEnd& e :
       {ProcessEnd{ProcessEnd::How::exited, 1, {}}, ProcessEnd{ProcessEnd::How::signalled, SIGKILL, {}},
        ProcessEnd::lost_with_node(3), ProcessEnd::not_started("no such file")}) {
    const Exited x = std::get<Exited>(decode_node(encode(NodeMessage{Exited{5, e}})));
    EXPECT_EQ(x.device, 5u);
    EXPECT_EQ(x.end.how, e.how);
    EXPECT_EQ(x.end.code, e.code);
    EXPECT_EQ(x.end.describe(), e.describe());
  }
  EXPECT_EQ(ProcessEnd::of_wait_status(W_EXITCODE(3, 0)).describe(), "exited with status 3");
  EXPECT_TRUE(ProcessEnd::of_wait_status(W_EXITCODE(0, 0)).exited_cleanly());
  EXPECT_EQ(ProcessEnd::of_wait_status(SIGKILL).describe(), "killed by signal Killed");
  EXPECT_EQ(ProcessEnd::lost_with_node(2).describe(), "lost with its node agent 2");
  // A node that says only the words (no "how"): unknown, never a clean exit,
  // whatever the words say; its words are kept for the journal.
  const Exited old = std::get<Exited>(
      decode_node(nlohmann::json{{"type", "exit"}, {"device", 1}, {"status", "exited with status 0"}}));
  EXPECT_EQ(old.end.how, ProcessEnd::How::unknown);
  EXPECT_FALSE(old.end.exited_cleanly());
  EXPECT_EQ(old.end.describe(), "exited with status 0");
  EXPECT_THROW(decode_node(nlohmann::json{{"type", "exit"}, {"device", 1}, {"how", "vanished"}, {"code", 0}}),
               sigma::Error);

  const Spawn s =
      std::get<Spawn>(decode_root(encode(RootMessage{Spawn{4, {{"SIGMA_DEVICE", "4"}, {"A", "b c"}}}})));
  EXPECT_EQ(s.device, 4u);
  ASSERT_EQ(s.env.size(), 2u);
  EXPECT_EQ(std::get<Kill>(decode_root(encode(RootMessage{Kill{4, 19}}))).signal, 19);
  EXPECT_EQ(std::get<NodeGoodbye>(decode_root(encode(RootMessage{NodeGoodbye{3, {}}}))).code, 3);
}

TEST(Protocol, MalformedMessagesAreRefusedNamingTheKindAndTheField) {
  expect_refused(decode_worker, json::array({1, 2}), {"JSON object"});
  expect_refused(decode_worker, json{{"step", 1}}, {"\"type\""});
  expect_refused(decode_worker, json{{"type", "teleport"}}, {"teleport", "not a message a worker sends"});
  expect_refused(decode_worker,
                 json{{"type", "recover"},
                      {"code", "melted"},
                      {"reason", ""},
                      {"generation", 1},
                      {"own", json::array()},
                      {"replica", json::array()},
                      {"disk", json::array()}},
                 {"recover.code", "melted"});
  expect_refused(decode_worker, json{{"type", "step"}, {"seconds", 1.0}}, {"step.step", "missing"});
  expect_refused(decode_worker, json{{"type", "step"}, {"step", "nine"}, {"seconds", 1.0}},
                 {"step.step", "integer"});
  expect_refused(decode_worker, json{{"type", "step"}, {"step", -1}, {"seconds", 1.0}},
                 {"step.step", "range"});
  expect_refused(decode_worker, json{{"type", "hello"}, {"device", uint64_t{1} << 33}},
                 {"hello.device", "range"});
  json hb = encode(WorkerMessage{Heartbeat{}});
  hb["telemetry"] = json::array({{1, 0, 2, 3.0}});  // version 1's positional sample
  expect_refused(decode_worker, hb, {"heartbeat.telemetry[].field", "missing"});
  expect_refused(decode_agent,
                 json{{"type", "assign"},
                      {"rank", 3},
                      {"world", 3},
                      {"generation", 1},
                      {"restore", "none"},
                      {"index", 0},
                      {"handoff", json::array()}},
                 {"assign.rank", "rank 3 of a world of 3"});
  expect_refused(decode_agent,
                 json{{"type", "assign"},
                      {"rank", 0},
                      {"world", 1},
                      {"generation", 1},
                      {"restore", "tape"},
                      {"index", 0},
                      {"handoff", json::array()}},
                 {"assign.restore", "tape"});
  expect_refused(decode_root, json{{"type", "spawn"}, {"device", 1}, {"env", {{"A", 1}}}}, {"spawn.env.A"});
  expect_refused(decode_greeting, json{{"type", "step"}, {"step", 1}, {"seconds", 1.0}},
                 {"must start with hello"});
}

TEST(Protocol, APeerOfAnotherVersionIsRefusedByName) {
  EXPECT_FALSE(refusal(kVersion).has_value());
  // Version 1 sent no version: its hello reads as version 1 and is refused.
  const Greeting g = decode_greeting(json{{"type", "hello"}, {"device", 0}, {"pid", 5}});
  const auto& h = std::get<Hello>(g);
  EXPECT_EQ(h.version, 1u);
  const auto why = refusal(h.version);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("protocol version 1"), std::string::npos) << *why;
  EXPECT_NE(why->find("this agent speaks version " + std::to_string(kVersion)), std::string::npos) << *why;
  EXPECT_TRUE(refusal(kVersion + 1).has_value());
  EXPECT_EQ(std::get<NodeHello>(decode_greeting(json{{"type", "node"}, {"node", 1}})).version, 1u);
}

// What a follower agent lets through of a root's spawn request: its own
// SIGMA_* variables, never a preload, a PATH or a plugin folder.
TEST(Follower, SpawnsWorkersWithOnlyTheAgentsOwnEnvironment) {
  const auto [env, refused] = agent::allowed_env({{"SIGMA_DEVICE", "3"},
                                                  {"LD_PRELOAD", "/tmp/evil.so"},
                                                  {"SIGMA_WORKER_TOKEN", "ab"},
                                                  {"PATH", "/tmp"},
                                                  {"SIGMA_HAL_PLUGIN_PATH", "/tmp"}});
  EXPECT_EQ(env, (agent::EnvList{{"SIGMA_DEVICE", "3"}, {"SIGMA_WORKER_TOKEN", "ab"}}));
  EXPECT_EQ(refused, (std::vector<std::string>{"LD_PRELOAD", "PATH", "SIGMA_HAL_PLUGIN_PATH"}));
}

TEST(Protocol, AHelloCarriesItsLaunchToken) {
  Hello h;
  h.device = 2;
  h.token = "0123abcd";
  EXPECT_EQ(std::get<Hello>(decode_worker(encode(WorkerMessage{h}))).token, "0123abcd");
  h.token.clear();
  EXPECT_FALSE(encode(WorkerMessage{h}).contains("token"));
}

}  // namespace
}  // namespace sigma::runtime::protocol
