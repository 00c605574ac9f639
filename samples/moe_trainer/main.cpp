// moe_trainer: the reference integration. A byte-level MoE transformer
// (model.hpp) trained data x expert parallel over the HAL under `sigmarun`,
// with libsigma's engines in the loop. Read it top to bottom: each engine
// call says what it is for in one line.
//
//   sigmarun --nproc 4 --spares 1 --vendor sim ... --
//       moe_trainer --data kjv.txt --steps 300 [--guardrails g.yaml] [--poison-batches 120]
//
// Deterministic: the batch of a step, the initial weights and every
// reduction depend only on (seed, world, step), and the memory tier restores
// the whole state (parameters, AdamW moments, the guardrails' policy state
// and the data windows skipped), so a run that loses workers ends with the
// same bytes as a run that does not. Only a guardrail's decision (a skipped
// step, a rollback that skips data) changes the result; the log says so.
#include "adamw.hpp"
#include "autotuner.hpp"
#include "corpus.hpp"
#include "model.hpp"
#include "plan.hpp"

#include <sigma/bootstrap.hpp>
#include <sigma/guardrails.hpp>
#include <sigma/host_staging.hpp>
#include <sigma/parallel.hpp>
#include <sigma/planner.hpp>
#include <sigma/runtime.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace {

namespace par = sigma::parallel;
namespace gr = sigma::guardrails;
using json = nlohmann::json;

struct Options {
  std::string data, guardrails;
  uint64_t steps = 300, seed = 1, warmup = 30;
  int64_t batch = 8;  // sequences per rank and step
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, gemm_gflops = 0, model_gflops = 0;
  int threads = 1;
  std::vector<uint64_t> poison;
  bool guardrails_on = true, autotune_on = true;  // off: the benchmark's "features off" side
  int64_t expert_slots = 0;                       // per rank; 0: the even share and one more
  uint32_t replicas = 0;  // data-parallel replicas of one expert group (sigmarun --replica-size); 0: planned
  int64_t kill_at = -1;   // the recovery benchmark's fault: SIGKILL at this step ...
  uint32_t kill_device = 0;       // ... on this device, once
  std::string progress;           // "step N T" / "kill T" lines (CLOCK_MONOTONIC) to PREFIX.dDEVICE
  std::string precision = "f32";  // the GEMMs' precision: f32 or f16 (model.f16)
  std::string logit_growth;       // "LAYER:FROM:TO:PEAK" (LogitGrowth)
  moe::ModelConfig model;
};

// The growth of one layer's attention logits that destabilises large runs,
// made to happen here: from step `from` their gain rises geometrically to
// `peak` half-way to `to` and falls back to 1 at `to`. A function of the
// step alone, so a recomputed step sees the same gain.
struct LogitGrowth {
  int64_t layer = -1;
  uint64_t from = 0, to = 0;
  double peak = 1;
  double gain(uint64_t step) const {
    if (layer < 0 || step < from || step > to || to == from) return 1;
    const double x = static_cast<double>(step - from) / static_cast<double>(to - from);
    return std::pow(peak, 1 - std::fabs(2 * x - 1));
  }
  // "LAYER:FROM:TO:PEAK"; throws naming the option and the part that is wrong.
  static LogitGrowth parse(const std::string& text, int64_t layers) {
    LogitGrowth g;
    if (text.empty()) return g;
    char tail = 0;
    unsigned long long from = 0, to = 0;
    if (text.find('-') != std::string::npos ||
        std::sscanf(text.c_str(), "%" SCNd64 ":%llu:%llu:%lf%c", &g.layer, &from, &to, &g.peak, &tail) != 4)
      throw std::runtime_error("moe_trainer: --logit-growth '" + text + "': expected LAYER:FROM:TO:PEAK");
    g.from = from, g.to = to;
    if (g.layer < 0 || g.layer >= layers)
      throw std::runtime_error("moe_trainer: --logit-growth: layer " + std::to_string(g.layer) +
                               " is not one of the model's " + std::to_string(layers));
    if (g.to <= g.from) throw std::runtime_error("moe_trainer: --logit-growth: TO must come after FROM");
    if (!(g.peak >= 1) || !std::isfinite(g.peak))
      throw std::runtime_error("moe_trainer: --logit-growth: PEAK must be a finite gain of at least 1");
    return g;
  }
};

// Expert slots per rank: the even share and room for one more, so the
// autotuner can move an expert in. Every slot is in each snapshot,
// checkpoint and optimizer step, empty or not: more room costs time.
int64_t expert_slots(const Options& o, uint32_t ep) {
  const int64_t share = o.model.experts / ep;
  const int64_t want = o.expert_slots > 0 ? o.expert_slots : share + 1;
  if (want < share)
    throw std::runtime_error("moe_trainer: --expert-slots below the even share " + std::to_string(share));
  return std::min<int64_t>(o.model.experts, want);
}

// The expert group's size when --replicas pins it: sigmarun's replica
// groups are the expert groups, the replicas the data-parallel degree.
uint32_t expert_group(const Options& o, uint32_t world) {
  if (o.replicas == 0) return 0;
  if (world % o.replicas != 0)
    throw std::runtime_error("moe_trainer: --replicas " + std::to_string(o.replicas) +
                             " does not divide the " + std::to_string(world) + " ranks");
  return world / o.replicas;
}

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Linear warm-up, then cosine decay to min_lr.
double learning_rate(const Options& o, uint64_t step) {
  if (step < o.warmup) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup);
  const double p =
      static_cast<double>(step - o.warmup) / static_cast<double>(std::max<uint64_t>(1, o.steps - o.warmup));
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1 + std::cos(M_PI * std::min(1.0, p)));
}

uint32_t env_u32(const char* name, uint32_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : fallback;
}

// One line per step (rank 0), the report's input.
class Log {
 public:
  explicit Log(const std::string& path) : f_(path, std::ios::app) {}
  void write(const json& j) { f_ << j.dump() << '\n' << std::flush; }

 private:
  std::ofstream f_;
};

gr::Config guardrails_config(const Options& o) {
  if (!o.guardrails.empty()) return gr::Config::from_yaml_file(o.guardrails);
  gr::Config c;
  c.loss_scaling.enabled = o.model.f16;  // f16 GEMMs: a loss scale (f32 needs none) ...
  c.precision.enabled = o.model.f16;     // ... and layers to escalate
  c.sdc.interval = 50;
  return c;
}

// The trainer's state and one step of it; main() below is the loop around
// it. One thread (the training loop's), except the abort hook.
class Trainer {
 public:
  Trainer(const Options& o, sigma::runtime::Session& s, const sigma::runtime::SessionOptions& so,
          const moe::Rates& rates)
      : o_(o),
        s_(s),
        so_(so),
        corpus_(o.data),
        world_(env_u32("SIGMA_WORLD_SIZE", 1)),
        gemm_(rates.gemm_gflops),
        plan_(moe::plan_layout(o.model, o.batch, world_, rates, expert_group(o, world_))),
        predicted_step_s_(plan_.predicted_step_s),
        launch_rank_(env_u32("SIGMA_RANK", 0)),
        slots_(expert_slots(o, plan_.layout.ep)),
        model_(o.model, par::coords_of(plan_.layout, launch_rank_ % world_).ep_index, plan_.layout.ep, slots_,
               o.seed),
        dense_opt_(model_.dense),
        expert_opt_(model_.expert),
        tuner_(static_cast<uint32_t>(o.model.experts), plan_.layout.ep, slots_),
        gcfg_(guardrails_config(o)),
        store_(sigma::bootstrap::open_store(so.store)),
        staging_(s.plugin()),
        poison_(o.poison.begin(), o.poison.end()),
        growth_(LogitGrowth::parse(o.logit_growth, o.model.layers)) {
    // The guardrails' layers: the dense parameters' segments, then the
    // experts of each block (their gradients are each rank's own, so only
    // their activations are reported). A layer with f16 GEMMs is an f16
    // layer: escalated, it runs them in f32.
    const auto& parts = model_.precision_parts();
    const auto dtype = [&](const std::string& name) {
      const bool f16 = o.model.f16 && std::find(parts.begin(), parts.end(), name) != parts.end();
      return f16 ? HAL_DTYPE_F16 : HAL_DTYPE_F32;
    };
    for (const auto& seg : model_.dense_layers) layers_.push_back({seg.name, dtype(seg.name)});
    for (const auto& name : parts)
      if (name.find(".experts") != std::string::npos) layers_.push_back({name, dtype(name)});
    for (const auto& name : parts)
      for (size_t l = 0; l < layers_.size(); ++l)
        if (layers_[l].name == name) part_layer_.push_back(l);
    auto f32 = [](const char* name, torch::Tensor& t) {
      return sigma::checkpoint::TensorView(name, HAL_DTYPE_F32, {t.numel()}, t.data_ptr());
    };
    // What the memory tier snapshots every step and a replacement restores.
    s_.set_state({f32("dense", model_.dense), f32("dense.adam_m", dense_opt_.m),
                  f32("dense.adam_v", dense_opt_.v), f32("experts", model_.expert),
                  f32("experts.adam_m", expert_opt_.m), f32("experts.adam_v", expert_opt_.v)});
    // ... and the small state beside them: the guardrails' policy (it
    // remembers a spike it rolled back from) and the experts' placement.
    sigma::runtime::StateItem policy;
    policy.name = "guardrails";
    policy.max_bytes = 56 << 10;
    policy.save = [this] { return guard_ ? guard_->save_state() : std::string(); };
    policy.restore = [this](std::string_view b) { policy_.assign(b.data(), b.size()); };
    policy.kept_on_rollback = true;
    s_.add_state_item(std::move(policy));
    s_.add_state_item(tuner_.state_item(model_));
    // The expert layout's own communicators are aborted with the session's when a peer fails.
    s_.on_abort([this] {
      std::lock_guard<std::mutex> lk(groups_mu_);
      if (groups_) groups_->abort();
    });
    if (!o.progress.empty())
      progress_log_ = std::fopen((o.progress + ".d" + std::to_string(so.device)).c_str(), "a");
  }
  ~Trainer() {
    s_.on_abort(nullptr);
    if (progress_log_) std::fclose(progress_log_);
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // After join or recover: this generation's groups, dispatcher and guardrails.
  void setup(uint64_t index) {
    const par::Layout& layout = plan_.layout;
    if (s_.world_size() != world_)
      throw std::runtime_error("moe_trainer: the job shrank to " + std::to_string(s_.world_size()) +
                               " ranks; this trainer keeps its launch world of " + std::to_string(world_));
    const par::Coords me = par::coords_of(layout, s_.rank());
    if (index == 0 && s_.rank() != launch_rank_) model_.init_experts(me.ep_index, layout.ep, o_.seed);
    dispatcher_.reset();
    {
      std::lock_guard<std::mutex> lk(groups_mu_);
      groups_.reset();
    }
    staging_.release();  // the old groups' buffer
    replicated_ = replica_groups();
    // The expert group is the world, or sigmarun's replica groups are the
    // expert groups (every replica then decides alike: Autotuner). Expert
    // groups of the trainer's own (par::Groups) keep their placement.
    tuning_ = o_.autotune_on && (layout.ep == world_ || replicated_);
    if (layout.ep < world_ && !replicated_) {
      auto g = std::make_unique<par::Groups>(s_.plugin(), store_,
                                             "groups-" + std::to_string(s_.generation()) + "/", 0, s_.rank(),
                                             layout, std::chrono::seconds(30));
      std::lock_guard<std::mutex> lk(groups_mu_);
      groups_ = std::move(g);
    }
    // With sigmarun's replica groups the session holds the expert group (its
    // replica) and the data-parallel one (this position in every live replica).
    sigma::hal::Communicator& ep_comm = replicated_ ? s_.replica_comm()
                                        : groups_   ? groups_->comm(par::GroupKind::expert)
                                                    : s_.comm();
    dispatcher_ = std::make_unique<par::Dispatcher>(
        ep_comm, me.ep_index, layout.ep,
        par::DispatchOptions{static_cast<uint32_t>(o_.model.experts), par::Exchange::all_to_all,
                             std::chrono::seconds(60)});
    gr::Config c = gcfg_;
    if (s_.rank() == 0) c.journal.path = so_.job_dir + "/guardrails.jsonl";
    // Over the replica alone with replica groups: every replica decides on
    // the same exchanged gradients and loss, so alike, and a fault in another
    // replica never touches this group.
    const gr::Group g = replicated_ ? gr::Group{&s_.replica_comm(), 0, static_cast<int>(me.ep_index),
                                                static_cast<int>(layout.ep), gr::GradLayout::replicated}
                                    : gr::Group{&s_.comm(), 0, static_cast<int>(s_.rank()),
                                                static_cast<int>(world_), gr::GradLayout::replicated};
    guard_ = std::make_unique<gr::Guardrails>(c, layers_, g);
    if (!policy_.empty()) guard_->restore_state(policy_);  // the policy as the state holds it
    tuner_.apply(model_, *dispatcher_);                    // the experts' placement as it was
    // The planner's prediction, priced again with the links as the HAL measures them (once, all ranks).
    if (s_.generation() == 1 && index == 0 && world_ > 1) {
      links_ = moe::probe_links(s_.comm(), s_.plugin(), world_);
      predicted_step_s_ = moe::predict_with_links(plan_, links_);
    }
    if (s_.rank() == 0 && !log_) log_.emplace(so_.job_dir + "/trainer.jsonl");
    if (log_) {
      log_->write({{"event", "joined"},
                   {"t", now_s()},
                   {"rank", s_.rank()},
                   {"device", so_.device},
                   {"generation", s_.generation()},
                   {"index", index},
                   {"plan", plan_.describe},
                   {"predicted_step_s", predicted_step_s_},
                   {"gemm_gflops", gemm_},
                   {"model_gflops", plan_.devices.model_tflops * 1e3},
                   {"link_latency_us", links_.latency_us},
                   {"link_gbps", links_.gbps},
                   {"flops_per_token", plan_.flops_per_token},
                   {"world", world_}});
    }
  }

  // One training step; returns the guardrails' decision (every rank the
  // same) and the autotuner's move, if any.
  std::pair<gr::Decision, std::optional<par::Rebalance>> step(uint64_t step, uint64_t b) {
    const double t0 = now_s();
    json fp;  // the fingerprint vote, when one ran
    if (replicated_ && o_.guardrails_on && guard_->fingerprint_due(step)) fp = check_replicas(step);
    model_.dense_grad.zero_();
    model_.expert_grad.zero_();
    // Each part in the precision the guardrails hold for it (restored with
    // their state), the step's logit gain, and the loss scale.
    const auto& parts = model_.precision_parts();
    std::vector<std::string> ran_f32;  // for the log: the parts this step runs in f32
    for (size_t i = 0; i < parts.size(); ++i) {
      const bool f32 = o_.model.f16 && o_.guardrails_on && guard_->escalated(parts[i]);
      model_.set_f32(i, f32);
      if (f32) ran_f32.push_back(parts[i]);
    }
    model_.set_logit_gain(growth_.layer, growth_.gain(step));
    model_.take_activation_amax();  // this step's figures only (an aborted one's forward left some)
    const double scale = o_.guardrails_on ? guard_->loss_scale() : 1.0;
    moe::MoeStats stats;
    double ce_sum = 0;
    for (const uint32_t data_rank : data_ranks()) {
      const torch::Tensor batch =
          corpus_.batch(o_.seed, b, data_rank, o_.batch, o_.model.seq, poison_.count(b) > 0);
      moe::MoeStats st;
      torch::Tensor ce;
      const torch::Tensor loss = model_.loss(batch, *dispatcher_, &st, &ce);  // MoE tokens through the HAL
      (loss * (scale / static_cast<double>(world_))).backward();              // ... and their gradients back
      ce_sum += ce.item<double>();
      stats.tokens += st.tokens;
      stats.routed += st.routed;
      stats.dropped += st.dropped;
      stats.aux = st.aux;
    }
    // The autotuner's sample, riding on the guardrails' exchange (with
    // replica groups, first the worst of its counterparts': exchange()).
    const double t_fb = now_s();
    std::vector<double> sample;
    if (tuning_) sample = tuner_.sample(model_, s_.plugin());
    const double sample_s = now_s() - t_fb;
    const double ce_mean = exchange(ce_sum, sample);
    // The guardrails see the replicated gradients; a non-finite expert
    // gradient (this rank's alone) reaches them as a non-finite loss.
    const bool experts_finite = torch::isfinite(model_.expert_grad).all().item<bool>();
    const double t_sample = now_s();
    const std::vector<double> act = activation_amax();
    const gr::Decision d = decide(step, experts_finite ? ce_mean : std::nan(""), sample, act);
    const double t_decide = now_s();
    // The replica's ranks saw different finite exchanged gradients: a silent
    // error in its exchange or memory. Skipping (the guardrails' answer)
    // would keep it apart from the other replicas, which applied the step:
    // it leaves and takes their state instead. (A non-finite value anywhere
    // reaches every replica as a non-finite loss: all skip alike.)
    if (replicated_ && !d.mismatch_ranks.empty() && d.non_finite == 0 && std::isfinite(d.loss))
      throw sigma::Error(sigma::Code::data_loss,
                         "replica " + std::to_string(s_.replicas().index) + ", step " + std::to_string(step) +
                             ": its ranks' exchanged gradients differ (silent corruption in its exchange or "
                             "memory); it takes its counterparts' state");
    if (d.action == gr::Action::apply) {
      const double lr = learning_rate(o_, step);
      model_.dense_grad.mul_(d.grad_multiplier);
      model_.expert_grad.mul_(d.grad_multiplier);
      dense_opt_.update(model_.dense, model_.dense_grad, lr, o_.weight_decay, step + 1);
      expert_opt_.update(model_.expert, model_.expert_grad, lr, o_.weight_decay, step + 1);
    }
    if (d.check_fingerprint &&
        !replicated_) {  // replicas' parameters compared: silent corruption named by rank
      const auto r = guard_->check_fingerprint(
          step, {{model_.dense.data_ptr(), static_cast<uint64_t>(model_.dense.numel()), HAL_DTYPE_F32}});
      fp = {{"match", r.match}, {"odd_ranks", r.odd_ranks}};
    }
    const double t_fp = now_s();
    std::optional<par::Rebalance> moved;
    if (tuning_ && d.action != gr::Action::rollback) {  // experts off a slow link, or back
      const uint32_t ep_rank = replicated_ ? s_.replicas().position : s_.rank();
      moved = tuner_.step(step, o_.guardrails_on ? d.riders : gather_samples(sample), model_, expert_opt_,
                          *dispatcher_, replicated_ ? s_.replica_comm() : s_.comm(), ep_rank);
    }
    const bool snapshot_due = (step + 1) % so_.snapshot_every == 0;
    if (snapshot_due && d.action != gr::Action::rollback) guard_->note_snapshot(step);  // step_end takes it
    if (log_) {
      const double dt = now_s() - t0;
      log_->write({{"event", "step"},
                   {"t", now_s()},
                   {"step", step},
                   {"batch", b},
                   {"loss", d.loss},
                   {"action", gr::action_name(d.action)},
                   {"reason", d.reason},
                   {"norm", d.global_norm},
                   {"lr", learning_rate(o_, step)},
                   {"step_s", dt},
                   {"phases_s",  // where the step's time went
                    {{"forward_backward_allreduce", t_sample - t0 - sample_s},
                     {"autotune_sample", sample_s},
                     {"guardrails", t_decide - t_sample},
                     {"optimizer_fingerprint", t_fp - t_decide},
                     {"autotune_bookkeeping", now_s() - t_fp}}},
                   {"tokens_per_s", static_cast<double>(tokens()) / dt},
                   {"dropped", stats.dropped},
                   {"routed", stats.routed},
                   {"aux", stats.aux},
                   {"mismatch_ranks", d.mismatch_ranks},
                   {"non_finite_ranks", d.non_finite_ranks},
                   {"fingerprint", fp},
                   {"generation", s_.generation()},
                   {"poisoned", poison_.count(b) > 0},
                   {"loss_scale", d.loss_scale},
                   {"logit_gain", growth_.gain(step)},
                   {"f32_parts", ran_f32},
                   {"activation_amax", act_json(act)},
                   {"rebalance", moved ? json::parse(par::rebalance_json(*moved)) : json()}});
    }
    return {d, moved};
  }

  // After the session's rollback (this rank's own snapshot back, the data
  // window skipped): the experts' placement is the snapshot's.
  void rolled_back(uint64_t next) {
    tuner_.apply(model_, *dispatcher_);
    if (log_)
      log_->write(
          {{"event", "rollback"}, {"t", now_s()}, {"to_step", next}, {"skips", s_.skipped_batches()}});
  }

  // The loop's step: the guardrails' decision as the session's outcome.
  sigma::runtime::StepOutcome outcome(uint64_t step, uint64_t batch) {
    if (static_cast<int64_t>(step) == o_.kill_at && so_.device == o_.kill_device) {
      progress("kill");
      ::kill(::getpid(), SIGKILL);  // the recovery benchmark's fault
    }
    const auto [d, moved] = this->step(step, batch);
    sigma::runtime::StepOutcome out;
    if (d.action == gr::Action::rollback) {  // repeated spikes may escalate too: said with it
      out.rollback = sigma::runtime::Rollback{d.rollback_to_step + 1, d.skip_data_begin, d.skip_data_end,
                                              d.reason + precision_note(d, "; ")};
      return out;
    }
    std::string note;
    if (d.action != gr::Action::apply) note = std::string("skipped: ") + d.reason;
    if (moved) note += (note.empty() ? "" : "; ") + std::string("rebalanced: ") + moved->reason;
    note += precision_note(d, note.empty() ? "" : "; ");
    out.report = report(d, note);
    return out;
  }

  // The decision's precision changes as note parts the report reads
  // ("escalated L to f32: why; returned L to f16: why"), after `lead`.
  static std::string precision_note(const gr::Decision& d, const std::string& lead) {
    std::string out;
    const auto say = [&](const std::string& part) { out += (out.empty() ? lead : "; ") + part; };
    for (size_t i = 0; i < d.escalate.size(); ++i)
      say("escalated " + d.escalate[i] + " to f32: " + d.escalate_why[i]);
    for (size_t i = 0; i < d.deescalate.size(); ++i)
      say("returned " + d.deescalate[i] + " to f16: " + d.deescalate_why[i]);
    return out;
  }

  // What the agent shows of a step: loss, tokens, FLOPs against the
  // measured GEMM rate of the cores the workers share, and a note.
  sigma::runtime::StepReport report(const gr::Decision& d, const std::string& note) const {
    sigma::runtime::StepReport r;
    r.loss = d.loss;
    r.tokens = tokens();
    r.flops = plan_.flops_per_token * static_cast<double>(r.tokens);
    r.peak_flops = gemm_ * 1e9 * std::min<double>(world_, std::thread::hardware_concurrency());
    r.note = note;
    return r;
  }

  // "step N T" / "kill T" for the recovery benchmark.
  void progress(const std::string& what) {
    if (!progress_log_) return;
    std::fprintf(progress_log_, "%s %.6f\n", what.c_str(), now_s());
    std::fflush(progress_log_);
  }

  // The final state, per rank, parameters and AdamW moments both: the
  // dense ones in final-rank-R.bin, and each expert this rank holds, by its
  // global index, in final-expert-E-rank-R.bin (every replica writes its
  // own: with ep < world each expert has several).
  void write_final(uint64_t steps) {
    const std::string rank = std::to_string(s_.rank());
    std::ofstream d(so_.job_dir + "/final-rank-" + rank + ".bin", std::ios::binary);
    for (const torch::Tensor* t : {&model_.dense, &dense_opt_.m, &dense_opt_.v})
      d.write(static_cast<const char*>(t->data_ptr()), t->numel() * 4);
    for (size_t e = 0; e < model_.slot_of.size(); ++e) {
      if (model_.slot_of[e] < 0) continue;
      std::ofstream f(so_.job_dir + "/final-expert-" + std::to_string(e) + "-rank-" + rank + ".bin",
                      std::ios::binary);
      for (const torch::Tensor* t : {&model_.expert, &expert_opt_.m, &expert_opt_.v})
        for (int64_t l = 0; l < o_.model.layers; ++l) {
          const torch::Tensor w = t->narrow(0, model_.slot_offset(l, model_.slot_of[e]), model_.slot_numel());
          f.write(static_cast<const char*>(w.data_ptr()), model_.slot_numel() * 4);
        }
    }
    if (log_) log_->write({{"event", "done"}, {"t", now_s()}, {"steps", steps}});
  }

 private:
  // Replica groups from sigmarun (--replica-size), checked against this
  // trainer's expert groups.
  bool replica_groups() const {
    const sigma::runtime::ReplicaLayout& r = s_.replicas();
    if (r.count <= 1) return false;
    if (r.size != plan_.layout.ep)
      throw std::invalid_argument("moe_trainer: sigmarun's replica groups have " + std::to_string(r.size) +
                                  " ranks and this trainer's expert groups " +
                                  std::to_string(plan_.layout.ep) + ": run it with --replicas " +
                                  std::to_string(r.count));
    return true;
  }

  // Whose data this rank computes, by the rank that has it in a fault-free
  // run: its own; with replica groups the micro-batches its replica holds
  // now (micro-batch m is replica m's data), every one of them while
  // another replica is out, none while its replica replays a donor's steps.
  std::vector<uint32_t> data_ranks() const {
    if (!replicated_) return {s_.rank()};
    const sigma::runtime::ReplicaLayout& r = s_.replicas();
    std::vector<uint32_t> out;
    for (const uint32_t m : s_.microbatches(r.count)) out.push_back(m * r.size + r.position);
    return out;
  }

  // The step's exchange: gradients summed over the replicas (dense over
  // every rank; experts over those that hold the same ones), and the loss
  // this rank's guardrails see. With replica groups it goes over the live
  // replicas (a replica going out voids the step: the session throws and
  // runs it again) and carries the loss, so every replica's guardrails see
  // the same figures, and the autotuner's `sample` (replaced by the worst
  // of every live replica's at this position: Autotuner::put).
  double exchange(double ce_sum, std::vector<double>& sample) {
    if (!replicated_) {
      s_.all_reduce(model_.dense_grad.data_ptr(), model_.dense_grad.numel(), HAL_DTYPE_F32);
      if (groups_ && groups_->size_of(par::GroupKind::expert_data) > 1)
        staging_.all_reduce(groups_->comm(par::GroupKind::expert_data), model_.expert_grad.data_ptr(),
                            model_.expert_grad.numel(), HAL_DTYPE_F32, HAL_REDUCE_SUM,
                            std::chrono::seconds(60));
      return ce_sum;
    }
    // Dense: first over the replica's ranks (each holds them all), then
    // over the replicas; the same sums in the same order on every rank.
    staging_.all_reduce(s_.replica_comm(), model_.dense_grad.data_ptr(), model_.dense_grad.numel(),
                        HAL_DTYPE_F32, HAL_REDUCE_SUM, std::chrono::seconds(60));
    s_.data_parallel_all_reduce(model_.dense_grad.data_ptr(), model_.dense_grad.numel(), HAL_DTYPE_F32);
    s_.data_parallel_all_reduce(model_.expert_grad.data_ptr(), model_.expert_grad.numel(), HAL_DTYPE_F32);
    // The loss, and whether any replica's exchanged gradients are not
    // finite (a fault in one replica's exchange): then every replica's
    // guardrails see a non-finite loss and all skip the step alike.
    const bool finite = torch::isfinite(model_.dense_grad).all().item<bool>() &&
                        torch::isfinite(model_.expert_grad).all().item<bool>();
    const uint32_t replicas = s_.replicas().count;
    std::vector<double> figures(2 + (sample.empty() ? 0 : moe::Autotuner::slots_size(replicas)), 0.0);
    figures[0] = ce_sum;
    figures[1] = finite ? 0.0 : 1.0;
    if (!sample.empty()) moe::Autotuner::put(sample, figures.data() + 2, s_.replicas().index);
    s_.data_parallel_all_reduce(figures.data(), figures.size(), HAL_DTYPE_F64);
    if (!sample.empty()) sample = moe::Autotuner::worst(figures.data() + 2, replicas);
    return figures[1] > 0 ? std::nan("") : figures[0] / replicas;
  }

  // Without the guardrails' exchange to ride on: every rank's sample of
  // the expert group (the world, or this rank's replica).
  std::vector<double> gather_samples(const std::vector<double>& mine) {
    if (!replicated_) return moe::Autotuner::gather(mine, s_, world_);
    const sigma::runtime::ReplicaLayout& r = s_.replicas();
    std::vector<double> all(mine.size() * r.size);
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(mine.size() * r.position));
    staging_.all_gather(s_.replica_comm(), all.data(), mine.size(), HAL_DTYPE_F64, r.position, r.size,
                        std::chrono::seconds(60));
    return all;
  }

  // With replica groups, at a fingerprint interval and before the step
  // computes anything: every live rank's prints of the parameters entering
  // the step (the dense ones, which every rank holds alike; dense and
  // experts, which its counterparts in the other replicas hold alike), one
  // slot each, summed over the data-parallel group and then over the
  // replica. The slots are disjoint, so the sums are exact and every live
  // rank votes on the same figures. A replica with an odd rank leaves
  // (Error data_loss): contained recovery gives it its counterparts' live
  // state, and the others run the step again without it.
  json check_replicas(uint64_t step) {
    const auto view = [](const torch::Tensor& t) {
      return gr::BufferView{t.data_ptr(), static_cast<uint64_t>(t.numel()), HAL_DTYPE_F32};
    };
    const sigma::runtime::ReplicaLayout& layout = s_.replicas();
    const uint64_t mine[2] = {gr::fingerprint({view(model_.dense)}),
                              gr::fingerprint({view(model_.dense), view(model_.expert)})};
    constexpr size_t kSlot = 5;  // two prints in 32-bit halves (exact in a double), present
    std::vector<double> slots(kSlot * world_, 0.0);
    double* slot = slots.data() + kSlot * (layout.index * layout.size + layout.position);
    for (int i = 0; i < 2; ++i) {
      slot[2 * i] = static_cast<double>(mine[i] >> 32);
      slot[2 * i + 1] = static_cast<double>(mine[i] & 0xffffffffu);
    }
    slot[4] = 1;
    s_.data_parallel_all_reduce(slots.data(), slots.size(), HAL_DTYPE_F64);
    staging_.all_reduce(s_.replica_comm(), slots.data(), slots.size(), HAL_DTYPE_F64, HAL_REDUCE_SUM,
                        std::chrono::seconds(60));
    const auto joined = [&](size_t at) {
      return (static_cast<uint64_t>(slots[at]) << 32) | static_cast<uint64_t>(slots[at + 1]);
    };
    std::vector<gr::RankPrints> prints(world_);
    for (size_t r = 0; r < prints.size(); ++r)
      prints[r] = {joined(kSlot * r), joined(kSlot * r + 2), slots[kSlot * r + 4] > 0};
    const gr::FingerprintResult r = gr::vote_replicas(step, layout.size, prints);
    guard_->note_fingerprints(r);
    for (const int odd : r.odd_ranks)
      if (static_cast<uint32_t>(odd) / layout.size == layout.index)
        throw sigma::Error(sigma::Code::data_loss, "silent corruption at step " + std::to_string(step) +
                                                       ": " + r.reason + "; replica " +
                                                       std::to_string(layout.index) +
                                                       " takes its counterparts' state");
    return {{"match", r.match}, {"odd_ranks", r.odd_ranks}, {"rerun_needed", r.rerun_needed}};
  }

  uint64_t tokens() const { return static_cast<uint64_t>(o_.batch * o_.model.seq) * world_; }

  // This rank's activation figures by guardrails layer (f16 training).
  std::vector<double> activation_amax() {
    if (!o_.model.f16) return {};
    const std::vector<double> by_part = model_.take_activation_amax();
    std::vector<double> out(layers_.size(), 0.0);
    for (size_t i = 0; i < by_part.size(); ++i) out[part_layer_[i]] = by_part[i];
    return out;
  }

  json act_json(const std::vector<double>& act) const {
    json j = json::object();
    for (const size_t l : part_layer_)
      if (l < act.size()) j[layers_[l].name] = std::isfinite(act[l]) ? json(act[l]) : json("inf");
    return j;
  }

  gr::Decision decide(uint64_t step, double loss, const std::vector<double>& riders,
                      const std::vector<double>& activations) {
    std::vector<std::vector<gr::BufferView>> grads;
    for (const auto& seg : model_.dense_layers)
      grads.push_back({{model_.dense_grad.data_ptr<float>() + seg.offset, static_cast<uint64_t>(seg.count),
                        HAL_DTYPE_F32}});
    grads.resize(layers_.size());  // the experts' layers: activations only
    if (o_.guardrails_on)
      return guard_->step(step, loss, grads, riders, activations);  // skip, clip, roll back: every rank alike
    gr::Decision d;  // the benchmark's baseline: apply, unchecked
    d.step = step;
    d.loss = loss;
    return d;
  }

  const Options& o_;
  sigma::runtime::Session& s_;
  const sigma::runtime::SessionOptions& so_;
  const moe::Corpus corpus_;
  const uint32_t world_;
  const double gemm_;
  const moe::Chosen plan_;
  double predicted_step_s_;
  moe::Links links_;
  const uint32_t launch_rank_;
  const int64_t slots_;
  moe::Model model_;
  moe::AdamW dense_opt_, expert_opt_;
  moe::Autotuner tuner_;
  bool tuning_ = false;      // the autotuner runs (setup)
  bool replicated_ = false;  // sigmarun's replica groups are the expert groups (setup)
  std::string policy_;       // the guardrails' policy the state restored, for setup()
  const gr::Config gcfg_;
  std::vector<gr::LayerInfo> layers_;
  std::vector<size_t> part_layer_;       // the model's precision part i is layers_[part_layer_[i]]
  std::mutex groups_mu_;                 // the groups against the session's abort hook
  std::unique_ptr<par::Groups> groups_;  // guarded by groups_mu_ (the pointer)
  const std::shared_ptr<sigma::bootstrap::Store> store_;
  std::unique_ptr<par::Dispatcher> dispatcher_;
  sigma::hal::HostStaging staging_;  // the expert-data group's all-reduce
  std::unique_ptr<gr::Guardrails> guard_;
  std::optional<Log> log_;
  const std::set<uint64_t> poison_;
  const LogitGrowth growth_;
  std::FILE* progress_log_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"moe_trainer: a byte-level MoE transformer trained under sigmarun"};
  bool measure = false, measure_model = false;
  app.add_flag("--measure-gemm", measure, "print this machine's one-thread GEMM rate in GFLOP/s and exit");
  app.add_option("--data", o.data, "text file to train on");
  app.add_option("--steps", o.steps, "training steps");
  app.add_option("--seed", o.seed, "weights and data order");
  app.add_option("--batch", o.batch, "sequences per rank and step");
  app.add_option("--lr", o.lr, "peak learning rate");
  app.add_option("--warmup", o.warmup, "warm-up steps");
  app.add_option("--layers", o.model.layers);
  app.add_option("--d-model", o.model.d_model);
  app.add_option("--ffn", o.model.ffn);
  app.add_option("--experts", o.model.experts);
  app.add_option("--top-k", o.model.top_k);
  app.add_option("--seq", o.model.seq);
  app.add_option("--capacity-factor", o.model.capacity_factor, "per expert and rank; 0: dropless");
  app.add_option("--threads", o.threads, "libtorch threads per worker");
  app.add_option("--expert-slots", o.expert_slots, "expert slots per rank (0: the even share and one more)");
  app.add_option("--replicas", o.replicas,
                 "data-parallel replicas of one expert group, as sigmarun --replica-size WORLD/R makes them "
                 "(0: the planner's layout)");
  app.add_option("--gemm-gflops", o.gemm_gflops, "measured GEMM rate of one worker (0: measure now)");
  app.add_flag("--measure-model", measure_model,
               "print this model's whole-step rate alone on one core in GFLOP/s and exit");
  app.add_option("--model-gflops", o.model_gflops, "... as --measure-model prints it (0: measure now)");
  app.add_option("--guardrails", o.guardrails, "guardrails YAML (default: f32 training, spike rollback on)");
  app.add_flag("!--no-guardrails", o.guardrails_on,
               "apply every step unchecked (the overhead benchmark's baseline)");
  app.add_flag("!--no-autotune", o.autotune_on, "never move experts");
  app.add_option("--kill-at", o.kill_at, "SIGKILL this worker when it starts this step (benchmarks)");
  app.add_option("--kill-device", o.kill_device, "... if it runs on this device");
  app.add_option("--progress-log", o.progress, "append step and kill times to PREFIX.dDEVICE (benchmarks)");
  app.add_option("--poison-batches", o.poison, "batches replaced by random bytes (a corrupt data shard)");
  app.add_option("--precision", o.precision, "the GEMMs' precision: f32, or f16 (its arithmetic on the CPU)")
      ->check(CLI::IsMember({"f32", "f16"}));
  app.add_option("--logit-growth", o.logit_growth,
                 "LAYER:FROM:TO:PEAK: that layer's attention logits grow to PEAK times and back");
  CLI11_PARSE(app, argc, argv);
  o.model.f16 = o.precision == "f16";
  try {
    // Workers share the cores: one thread each unless told, in libtorch and
    // in OpenBLAS (which keeps its own pool, sized to the machine).
    torch::set_num_threads(o.threads);
    if (auto* set = reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
      set(o.threads);
    if (measure) {
      std::printf("%.2f\n", moe::measure_gemm_gflops());
      return 0;
    }
    if (measure_model) {
      std::printf("%.2f\n", moe::measure_model_gflops(o.model, o.batch, o.seed));
      return 0;
    }
    if (o.data.empty()) throw std::runtime_error("moe_trainer: --data FILE is required");
    const auto so = sigma::runtime::SessionOptions::from_env();
    sigma::runtime::Session s(so);  // connects to sigmarun's agent, self-tests the device
    const moe::Rates rates{
        o.gemm_gflops > 0 ? o.gemm_gflops : moe::measure_gemm_gflops(),
        o.model_gflops > 0 ? o.model_gflops : moe::measure_model_gflops(o.model, o.batch, o.seed)};
    Trainer t(o, s, so, rates);

    // The loop is the session's: join, steps, the guardrails' rollbacks and
    // the data they skip, recovery from any libsigma error, finish.
    sigma::runtime::Loop loop;
    loop.total_steps = o.steps;
    loop.step = [&t](uint64_t step, uint64_t batch) { return t.outcome(step, batch); };
    loop.on_generation = [&t](uint64_t next) { t.setup(next); };  // this generation's groups
    loop.on_rollback = [&t](uint64_t next, const sigma::runtime::Rollback&) { t.rolled_back(next); };
    loop.on_step_done = [&t](uint64_t step) { t.progress("step " + std::to_string(step)); };
    const auto done = s.run(loop);
    if (!done) return 0;  // retired: a spare never needed, or moved off a suspect device
    t.write_final(*done);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_trainer: %s\n", e.what());
    return 1;
  }
}
