// The guardrail policies through the public API in one process: loss
// scaling, clipping, spikes with rollback, per-layer escalation and
// de-escalation, fingerprints, state round trips, the journal, bad input.
#include <sigma/guardrails.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

namespace sigma::guardrails {
namespace {

// Two layers of f32 gradients the tests fill by hand.
struct Grads {
  std::vector<float> a = std::vector<float>(1000, 0.001f), b = std::vector<float>(500, 0.001f);
  std::vector<std::vector<BufferView>> views() {
    return {{{a.data(), a.size(), HAL_DTYPE_F32}}, {{b.data(), b.size(), HAL_DTYPE_F32}}};
  }
};

Config quiet() {
  Config c;
  c.clipping.max_norm = 0;
  c.spike.enabled = false;
  c.precision.enabled = false;
  return c;
}

const std::vector<LayerInfo> kLayers = {{"a", HAL_DTYPE_F16}, {"b", HAL_DTYPE_BF16}};

TEST(Guardrails, LossScalingFollowsGradScaler) {
  Config c = quiet();
  c.loss_scaling.growth_interval = 3;
  Guardrails g(c, kLayers);
  Grads x;
  EXPECT_EQ(g.loss_scale(), 65536.0);
  for (uint64_t s = 1; s <= 2; ++s) EXPECT_EQ(g.step(s, 1.0, x.views()).next_loss_scale, 65536.0);
  Decision d = g.step(3, 1.0, x.views());
  EXPECT_EQ(d.action, Action::apply);
  EXPECT_EQ(d.loss_scale, 65536.0);
  EXPECT_EQ(d.next_loss_scale, 131072.0) << d.reason;
  EXPECT_DOUBLE_EQ(d.grad_multiplier, 1.0 / 65536.0);
  x.b[7] = std::numeric_limits<float>::infinity();
  d = g.step(4, 1.0, x.views());
  EXPECT_EQ(d.action, Action::skip);
  EXPECT_EQ(d.non_finite, 1u);
  EXPECT_EQ(d.next_loss_scale, 65536.0);
  EXPECT_NE(d.reason.find("layers b"), std::string::npos) << d.reason;
  x.b[7] = 0.001f;
  // The growth counter restarted at the overflow.
  for (uint64_t s = 5; s <= 6; ++s) EXPECT_EQ(g.step(s, 1.0, x.views()).next_loss_scale, 65536.0);
  EXPECT_EQ(g.step(7, 1.0, x.views()).next_loss_scale, 131072.0);
  // Off: the scale stays 1, non-finite steps are still skipped.
  Config off = quiet();
  off.loss_scaling.enabled = false;
  Guardrails h(off, kLayers);
  x.a[0] = std::numeric_limits<float>::quiet_NaN();
  d = h.step(1, 1.0, x.views());
  EXPECT_EQ(d.action, Action::skip);
  EXPECT_EQ(d.next_loss_scale, 1.0);
}

TEST(Guardrails, ANonFiniteLossIsSkippedAndTheScaleStopsAtItsMinimum) {
  Config c = quiet();
  c.loss_scaling.initial_scale = 4;
  c.loss_scaling.min_scale = 2;
  Guardrails g(c, kLayers);
  Grads x;
  Decision d = g.step(1, std::nan(""), x.views());
  EXPECT_EQ(d.action, Action::skip);
  EXPECT_NE(d.reason.find("loss is not finite"), std::string::npos);
  EXPECT_EQ(d.next_loss_scale, 2.0);
  EXPECT_EQ(g.step(2, INFINITY, x.views()).next_loss_scale, 2.0);
}

TEST(Guardrails, ClippingBringsTheUnscaledGlobalNormToMaxNorm) {
  Config c = quiet();
  c.clipping.max_norm = 1.0;
  c.loss_scaling.initial_scale = 8;
  Guardrails g(c, kLayers);
  Grads x;
  // Unscaled gradients 3 and 4 (norm 5), carried at scale 8.
  std::fill(x.a.begin(), x.a.end(), 0.0f);
  std::fill(x.b.begin(), x.b.end(), 0.0f);
  x.a[10] = 24.0f;
  x.b[20] = -32.0f;
  const Decision d = g.step(1, 1.0, x.views());
  EXPECT_EQ(d.action, Action::apply);
  EXPECT_NEAR(d.global_norm, 5.0, 1e-12);
  EXPECT_NEAR(d.clip_factor, 0.2, 1e-6);
  EXPECT_NEAR(d.grad_multiplier, 0.2 / 8, 1e-7);
  // Under the limit: untouched.
  x.a[10] = 2.4f, x.b[20] = 3.2f;
  EXPECT_EQ(g.step(2, 1.0, x.views()).clip_factor, 1.0);
}

Config spiky() {
  Config c = quiet();
  c.spike.enabled = true;
  c.spike.window = 30;
  c.spike.min_history = 10;
  c.spike.skip_before = 1;
  c.spike.skip_after = 5;
  c.spike.escalate_after = 2;
  c.spike.escalate_within = 100;
  return c;
}

double calm_loss(uint64_t step) { return 2.0 + 0.01 * std::sin(static_cast<double>(step)); }

TEST(Guardrails, ALossSpikeRollsBackToTheNewestSnapshotBeforeItAndSkipsItsData) {
  Guardrails g(spiky(), kLayers);
  Grads x;
  for (uint64_t s = 1; s <= 24; ++s) {
    ASSERT_EQ(g.step(s, calm_loss(s), x.views()).action, Action::apply) << s;
    if (s % 10 == 0) g.note_snapshot(s);
  }
  const Decision d = g.step(25, 20.0, x.views());
  EXPECT_EQ(d.action, Action::rollback) << d.reason;
  EXPECT_EQ(d.rollback_to_step, 20u);
  EXPECT_EQ(d.skip_data_begin, 24u);
  EXPECT_EQ(d.skip_data_end, 31u);
  EXPECT_NE(d.reason.find("median"), std::string::npos) << d.reason;
  // Training resumes after the snapshot; going back further is refused.
  EXPECT_THROW(g.step(20, 2.0, x.views()), Error);
  EXPECT_EQ(g.step(21, calm_loss(21), x.views()).action, Action::apply);
  // A second spike within the window escalates every low-precision layer.
  for (uint64_t s = 22; s <= 30; ++s) g.step(s, calm_loss(s), x.views());
  const Decision e = g.step(31, 30.0, x.views());
  EXPECT_EQ(e.action, Action::rollback);
  EXPECT_EQ(e.rollback_to_step, 20u);
  EXPECT_EQ(e.escalate, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(g.escalated("a"));
}

TEST(Guardrails, ASpikeWithNoSnapshotBeforeItIsSkippedAndSaysSo) {
  Guardrails g(spiky(), kLayers);
  Grads x;
  for (uint64_t s = 1; s <= 15; ++s) g.step(s, calm_loss(s), x.views());
  g.note_snapshot(16);  // after the spike's step: no use
  const Decision d = g.step(16, 50.0, x.views());
  EXPECT_EQ(d.action, Action::skip);
  EXPECT_NE(d.reason.find("no snapshot"), std::string::npos) << d.reason;
  // Noise inside the band is no spike.
  EXPECT_EQ(g.step(17, 2.009, x.views()).action, Action::apply);
}

TEST(Guardrails, OverflowRateEscalatesOneLayerAndACalmWindowStepsItBack) {
  Config c = quiet();
  c.precision.enabled = true;
  c.precision.window = 10;
  c.precision.max_overflow_rate = 0.2;  // two overflowing steps in ten
  c.precision.calm_steps = 5;
  Guardrails g(c, kLayers);
  Grads x;
  uint64_t s = 1;
  for (; s <= 3; ++s) EXPECT_TRUE(g.step(s, 1.0, x.views()).escalate.empty());
  x.a[3] = std::numeric_limits<float>::quiet_NaN();
  Decision d = g.step(s++, 1.0, x.views());
  EXPECT_TRUE(d.escalate.empty());
  d = g.step(s++, 1.0, x.views());
  EXPECT_EQ(d.escalate, std::vector<std::string>{"a"});
  EXPECT_TRUE(g.escalated("a"));
  EXPECT_FALSE(g.escalated("b"));
  x.a[3] = 0.001f;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(g.step(s++, 1.0, x.views()).deescalate.empty());
  d = g.step(s++, 1.0, x.views());
  EXPECT_EQ(d.deescalate, std::vector<std::string>{"a"});
  EXPECT_FALSE(g.escalated("a"));
}

TEST(Guardrails, AnF16LayerNearItsRangeIsEscalatedOnHeadroom) {
  Config c = quiet();
  c.precision.enabled = true;
  c.precision.min_headroom_bits = 4;
  c.loss_scaling.initial_scale = 2;
  Guardrails g(c, kLayers);
  Grads x;
  x.a[0] = 2 * 8000.0f;  // unscaled 8000: log2(65504 / 8000) = 3.03 bits
  x.b[0] = 2 * 8000.0f;  // bf16 has f32's range: plenty of headroom
  const Decision d = g.step(1, 1.0, x.views());
  EXPECT_EQ(d.escalate, std::vector<std::string>{"a"});
}

TEST(Guardrails, ActivationsNearTheF16RangeEscalateBeforeAnOverflowAndStepBackWhenCalm) {
  Config c = quiet();
  c.precision.enabled = true;
  c.precision.min_headroom_bits = 4;
  c.precision.calm_steps = 3;
  Guardrails g(c, kLayers);
  Grads x;
  uint64_t s = 1;
  EXPECT_TRUE(g.step(s++, 1.0, x.views(), {}, {1000.0, 1000.0}).escalate.empty());  // 6 bits of room
  // 5000: 3.7 bits below f16's 65504; bf16 (layer b) has f32's range.
  Decision d = g.step(s++, 1.0, x.views(), {}, {5000.0, 5000.0});
  EXPECT_EQ(d.action, Action::apply) << "nothing overflowed yet";
  ASSERT_EQ(d.escalate, std::vector<std::string>{"a"});
  ASSERT_EQ(d.escalate_why.size(), 1u);
  EXPECT_EQ(d.escalate_why[0].rfind("activation amax 5000 leaves 3.71 bits of headroom below f16's 65504", 0),
            0u)
      << d.escalate_why[0];
  EXPECT_FALSE(g.escalated("b"));
  // In f32 it reaches 1e5 (f16 would have overflowed), then falls to 3000
  // (4.4 bits: not the 5 a return asks for), then to 1000 for three steps.
  EXPECT_TRUE(g.step(s++, 1.0, x.views(), {}, {1e5, 1e5}).deescalate.empty());
  EXPECT_TRUE(g.step(s++, 1.0, x.views(), {}, {3000.0, 1.0}).deescalate.empty());
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(g.step(s++, 1.0, x.views(), {}, {1000.0, 1.0}).deescalate.empty());
  d = g.step(s++, 1.0, x.views(), {}, {1000.0, 1.0});
  EXPECT_EQ(d.deescalate, std::vector<std::string>{"a"});
  ASSERT_EQ(d.deescalate_why.size(), 1u);
  EXPECT_EQ(d.deescalate_why[0].rfind("calm for 3 steps", 0), 0u) << d.deescalate_why[0];
  EXPECT_FALSE(g.escalated("a"));
}

TEST(Guardrails, AnActivationThatOverflowedEscalatesItsLayerAtOnceAndKeepsItThere) {
  Config c = quiet();
  c.precision.enabled = true;
  c.precision.min_headroom_bits = 0;
  c.precision.calm_steps = 2;
  Guardrails g(c, kLayers);
  Grads x;
  Decision d = g.step(1, 1.0, x.views(), {}, {INFINITY, 1.0});
  ASSERT_EQ(d.escalate, std::vector<std::string>{"a"});
  ASSERT_EQ(d.escalate_why.size(), 1u);
  EXPECT_EQ(d.escalate_why[0], "an activation overflowed f16's 65504 (not finite)");
  // A NaN is not finite either: no calm step while it lasts.
  for (uint64_t s = 2; s < 6; ++s)
    EXPECT_TRUE(g.step(s, 1.0, x.views(), {}, {std::nan(""), 1.0}).deescalate.empty());
  EXPECT_TRUE(g.escalated("a"));
  g.step(6, 1.0, x.views(), {}, {1.0, 1.0});
  d = g.step(7, 1.0, x.views(), {}, {1.0, 1.0});
  EXPECT_EQ(d.deescalate, std::vector<std::string>{"a"});
  EXPECT_THROW(g.step(8, 1.0, x.views(), {}, {1.0}), Error) << "one figure for two layers";
}

TEST(Guardrails, StateRoundTripsAndForeignStateIsRefused) {
  Config c = spiky();
  c.precision.enabled = true;
  c.loss_scaling.growth_interval = 4;
  Guardrails g(c, kLayers);
  Grads x;
  for (uint64_t s = 1; s <= 13; ++s) g.step(s, calm_loss(s), x.views());
  g.note_snapshot(13);
  Guardrails h(c, kLayers);
  h.restore_state(g.save_state());
  EXPECT_EQ(h.save_state(), g.save_state());
  EXPECT_EQ(h.loss_scale(), g.loss_scale());
  EXPECT_THROW(h.step(13, 1.0, x.views()), Error);  // the step order survived too
  // A spike after the restore rolls back on both, to the snapshot noted
  // before the state was saved.
  const Decision a = g.step(14, 9.0, x.views()), b = h.step(14, 9.0, x.views());
  EXPECT_EQ(a.action, Action::rollback) << a.reason;
  EXPECT_EQ(a.rollback_to_step, 13u);
  EXPECT_EQ(b.action, Action::rollback) << b.reason;
  EXPECT_EQ(b.rollback_to_step, 13u);
  EXPECT_THROW(h.restore_state("{}"), Error);
  EXPECT_THROW(h.restore_state("not json"), Error);
  Guardrails other(c, {{"z", HAL_DTYPE_BF16}, {"b", HAL_DTYPE_BF16}});
  EXPECT_THROW(other.restore_state(g.save_state()), Error);
}

TEST(Guardrails, OneReplicaAlwaysMatchesItsOwnFingerprint) {
  Guardrails g(quiet(), kLayers);
  std::vector<float> p(100, 1.5f);
  EXPECT_TRUE(g.fingerprint_due(100));
  EXPECT_FALSE(g.fingerprint_due(101));
  Grads x;
  for (uint64_t s = 98; s <= 101; ++s) EXPECT_EQ(g.step(s, 1.0, x.views()).check_fingerprint, s == 100) << s;
  const auto r = g.check_fingerprint(100, {{p.data(), p.size(), HAL_DTYPE_F32}});
  EXPECT_TRUE(r.match);
  EXPECT_EQ(r.fingerprints.size(), 1u);
  EXPECT_THROW(g.attribute_rerun(100, 1, "spare"), Error);
  const uint64_t before = fingerprint({{p.data(), p.size(), HAL_DTYPE_F32}});
  p[50] = 1.5000001f;
  EXPECT_NE(before, fingerprint({{p.data(), p.size(), HAL_DTYPE_F32}}));
}

// Two replicas of two ranks (0,1 | 2,3) and three (0,1 | 2,3 | 4,5): the
// shared prints are voted over every present rank, the whole ones over the
// counterparts (ranks of one position).
std::vector<RankPrints> prints(size_t ranks) {
  std::vector<RankPrints> p(ranks);
  for (size_t r = 0; r < ranks; ++r) p[r] = {7, 100 + r % 2, true};
  return p;
}

TEST(ReplicaVote, AgreeingReplicasMatch) {
  const FingerprintResult r = vote_replicas(25, 2, prints(4));
  EXPECT_TRUE(r.match) << r.reason;
  EXPECT_TRUE(r.odd_ranks.empty());
  EXPECT_FALSE(r.rerun_needed);
  EXPECT_EQ(r.fingerprints, (std::vector<uint64_t>{100, 101, 100, 101}));
}

TEST(ReplicaVote, AnOddSharedPrintNamesItsRankEvenWithTwoReplicas) {
  auto p = prints(4);
  p[2].shared = 8;  // its replicated parameters differ from the three others'
  p[2].whole = 99;  // ... and so does all it holds, from its one counterpart's
  const FingerprintResult r = vote_replicas(25, 2, p);
  EXPECT_FALSE(r.match);
  EXPECT_EQ(r.odd_ranks, std::vector<int>{2}) << r.reason;
  EXPECT_FALSE(r.rerun_needed) << "rank 0, its counterpart, agrees with everyone: settled";
  EXPECT_NE(r.reason.find("rank(s) 2 differ"), std::string::npos) << r.reason;
}

TEST(ReplicaVote, AReplicaWhoseRanksEachWentTheirOwnWayIsOddAsAWhole) {
  // A corrupt exchange result of rank 2 reached rank 3 through the
  // replica's guardrails (another clip): 0 and 1 agree, 2 and 3 agree with
  // no one. Two of four is no majority, but the only pair that agrees.
  auto p = prints(4);
  p[2] = {8, 98, true};
  p[3] = {9, 99, true};
  const FingerprintResult r = vote_replicas(25, 2, p);
  EXPECT_EQ(r.odd_ranks, (std::vector<int>{2, 3})) << r.reason;
  EXPECT_FALSE(r.rerun_needed);
  // Two pairs apart (each replica agrees with itself): nothing to go by.
  p[3] = {8, 99, true};
  const FingerprintResult tie = vote_replicas(25, 2, p);
  EXPECT_TRUE(tie.odd_ranks.empty()) << tie.reason;
  EXPECT_TRUE(tie.rerun_needed);
}

TEST(ReplicaVote, TwoCounterpartsApartWithNothingElseOddAreUnsettled) {
  auto p = prints(4);
  p[3].whole = 99;  // an expert of rank 3 differs from rank 1's copy; nothing else does
  const FingerprintResult r = vote_replicas(25, 2, p);
  EXPECT_FALSE(r.match);
  EXPECT_TRUE(r.odd_ranks.empty()) << "two copies, no majority: " << r.reason;
  EXPECT_TRUE(r.rerun_needed);
  EXPECT_NE(r.reason.find("no majority among the counterparts 1,3"), std::string::npos) << r.reason;
}

TEST(ReplicaVote, ThreeReplicasNameTheOddCounterpartAndAbsentOnesAreLeftOut) {
  auto p = prints(6);
  p[5].whole = 99;
  FingerprintResult r = vote_replicas(50, 2, p);
  EXPECT_EQ(r.odd_ranks, std::vector<int>{5}) << r.reason;
  EXPECT_FALSE(r.rerun_needed);
  // Replica 2 out: whatever its slots hold is not voted.
  p[4] = {1, 2, false};
  p[5] = {3, 4, false};
  r = vote_replicas(50, 2, p);
  EXPECT_TRUE(r.match) << r.reason;
  EXPECT_EQ(r.fingerprints[4], 0u);
  EXPECT_THROW(vote_replicas(50, 4, p), Error) << "6 ranks are not replicas of 4";
  EXPECT_THROW(vote_replicas(50, 0, p), Error);
}

TEST(Guardrails, EveryDecisionIsJournalledWithItsReasonAndFigures) {
  const std::string path =
      ::testing::TempDir() + "guardrails-journal-" + std::to_string(::getpid()) + ".jsonl";
  std::filesystem::remove(path);
  Config c = quiet();
  c.journal.path = path;
  {
    Guardrails g(c, kLayers);
    Grads x;
    g.step(1, 1.0, x.views());
    x.a[0] = INFINITY;
    g.step(2, 1.0, x.views());
  }
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["action"], "apply");
  EXPECT_EQ(lines[1]["action"], "skip");
  EXPECT_EQ(lines[1]["non_finite"], 1);
  EXPECT_EQ(lines[1]["non_finite_ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(lines[1]["next_loss_scale"], 32768.0);
  EXPECT_FALSE(lines[1]["reason"].get<std::string>().empty());
  c.journal.path = "/nonexistent-dir/j.jsonl";
  EXPECT_THROW(Guardrails(c, kLayers), Error);
}

TEST(Guardrails, BadInputIsRefusedWithTheReason) {
  Grads x;
  EXPECT_THROW(Guardrails(quiet(), {{"a", HAL_DTYPE_F16}, {"a", HAL_DTYPE_F16}}), Error);
  EXPECT_THROW(Guardrails(quiet(), {{"", HAL_DTYPE_F16}}), Error);
  EXPECT_THROW(Guardrails(quiet(), {{"a", HAL_DTYPE_I32}}), Error);
  Group two;
  two.world = 2;  // no communicator
  EXPECT_THROW(Guardrails(quiet(), kLayers, two), Error);
  Guardrails g(quiet(), kLayers);
  EXPECT_THROW(g.step(1, 1.0, {{}}), Error);
  auto v = x.views();
  v[1][0].dtype = HAL_DTYPE_I64;
  try {
    g.step(1, 1.0, v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'b' buffer 0"), std::string::npos) << e.what();
  }
  v = x.views();
  v[0][0].data = nullptr;
  EXPECT_THROW(g.step(1, 1.0, v), Error);
  EXPECT_THROW(g.escalated("zz"), Error);
}

// --- configuration -----------------------------------------------------

std::string refusal(const std::string& yaml) {
  try {
    Config::from_yaml(yaml, "g.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    return e.what();
  }
  return "(accepted)";
}

TEST(GuardrailsConfig, YamlSetsTheFieldsAndKeepsDefaultsForTheRest) {
  const Config c = Config::from_yaml(
      "loss_scaling:\n  initial_scale: 1024\n  growth_interval: 50\nclipping: {max_norm: 0.5}\n"
      "spike:\n  window: 40\n  skip_after: 3\nprecision: {enabled: false}\nsdc: {interval: 7}\n"
      "journal: {path: /tmp/x.jsonl, all_ranks: true}\nexchange_timeout_ms: 1500\n");
  EXPECT_EQ(c.loss_scaling.initial_scale, 1024);
  EXPECT_EQ(c.loss_scaling.growth_interval, 50u);
  EXPECT_EQ(c.loss_scaling.backoff_factor, 0.5);
  EXPECT_EQ(c.clipping.max_norm, 0.5);
  EXPECT_EQ(c.spike.window, 40u);
  EXPECT_EQ(c.spike.skip_after, 3u);
  EXPECT_FALSE(c.precision.enabled);
  EXPECT_EQ(c.sdc.interval, 7u);
  EXPECT_TRUE(c.journal.all_ranks);
  EXPECT_EQ(c.exchange_timeout.count(), 1500);
  EXPECT_NO_THROW(Config::from_yaml(""));
}

TEST(GuardrailsConfig, BadYamlIsRefusedWithFileLineKeyAndReason) {
  EXPECT_EQ(refusal("clipping:\n  max_nrm: 1\n"),
            "g.yaml:2: clipping.max_nrm: unknown key (allowed here: max_norm)");
  EXPECT_EQ(refusal("sdc:\n  interval: often\n"),
            "g.yaml:2: sdc.interval: expected a whole number >= 0, found 'often'");
  EXPECT_EQ(
      refusal("precision:\n  max_overflow_rate: -0.1\n").rfind("g.yaml:2: precision.max_overflow_rate: ", 0),
      0u);
  EXPECT_EQ(
      refusal("loss_scaling:\n  backoff_factor: 2\n").rfind("g.yaml:2: loss_scaling.backoff_factor: ", 0),
      0u);
  EXPECT_EQ(refusal("spike:\n  enabled: maybe\n"),
            "g.yaml:2: spike.enabled: expected true or false, found 'maybe'");
  EXPECT_EQ(refusal("spike:\n  window: 5\n  min_history: 9\n"),
            "g.yaml:3: spike.min_history: is larger than spike.window");
  EXPECT_EQ(refusal("loss_scaling:\n  min_scale: 10\n  max_scale: 5\n"),
            "g.yaml:2: loss_scaling.min_scale: is above max_scale");
  EXPECT_EQ(refusal("clipping: [1, 2\n").rfind("g.yaml:", 0), 0u);
  EXPECT_NE(refusal("clipping: [1, 2\n").find("(syntax)"), std::string::npos);
  EXPECT_EQ(refusal("colour: red\n").rfind("g.yaml:1: colour: unknown key", 0), 0u);
  try {
    Config::from_yaml_file("/nonexistent/g.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/g.yaml:0: (file): cannot open (No such file or directory)");
  }
}

TEST(GuardrailsConfig, ImpossibleStructValuesAreRefusedByName) {
  Config c;
  c.loss_scaling.growth_factor = 0.9;
  try {
    c.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss_scaling.growth_factor"), std::string::npos);
  }
  c = Config{};
  c.sdc.interval = 0;
  EXPECT_THROW(c.validate(), Error);
  c = Config{};
  c.clipping.max_norm = -1;
  EXPECT_THROW(Guardrails(c, kLayers), Error);
}

}  // namespace
}  // namespace sigma::guardrails
