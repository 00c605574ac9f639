// sigma/planner.hpp -- the layout planner: an analytic cost model of one
// training step for a model on a set of devices, and a search over the
// layouts that fit in memory.
//
// The model counts model FLOPs the PaLM way (6 x matmul parameters per token
// plus 6 * layers * sequence * the attention's score widths, no recompute)
// and prices a step as compute at the devices' GEMM rate, plus what the
// overlap does not hide of: tensor-parallel all-reduces, context-parallel
// key/value gathers, expert all-to-alls, pipeline sends, the pipeline
// bubble, and the data-parallel gradient exchange. Every efficiency is a
// named parameter of Efficiency, the same for every model and machine;
// what differs between machines is what they are (peak and GEMM rate,
// memory, link bandwidths) and what differs between frameworks is what
// they do (Framework). docs/parallel.md shows the model predicting
// published runs, each one left out of the fit of the constants.
#pragma once

#include <sigma/export.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::planner {

struct Model {
  std::string name{};
  uint32_t layers = 0, hidden = 0, ffn = 0, heads = 0, kv_heads = 0, vocab = 0;
  uint32_t experts = 1, top_k = 1;  // experts 1: a dense model
  uint32_t seq = 0;
  uint64_t global_batch = 0;     // sequences per step
  bool gated_ffn = false;        // SwiGLU / GeGLU: three FFN matrices instead of two
  bool parallel_block = false;   // attention and FFN side by side (one TP reduce per pass)
  uint32_t bytes_per_param = 2;  // bf16 / fp16 weights and gradients
  // Today's MoE (DeepSeek-V3: 256 fine-grained routed experts of width
  // 2048 and 1 shared, top-8, the first 3 layers dense with ffn 18432).
  uint32_t head_dim = 0;        // query/key/value width of a head (0: hidden / heads)
  uint32_t expert_ffn = 0;      // a routed expert's FFN width (0: ffn)
  uint32_t shared_experts = 0;  // experts every token passes
  uint32_t shared_ffn = 0;      // a shared expert's FFN width (0: expert_ffn)
  uint32_t dense_layers = 0;    // leading layers whose FFN is dense (width ffn)
  uint32_t max_nodes = 0;       // node-limited routing: a token's experts on at most this many nodes (0: any)
  uint32_t mtp_depth = 0;       // multi-token prediction modules (one more layer and output head each)
  // Multi-head latent attention (MLA); kv_lora 0: standard attention of
  // heads x hidden/heads with kv_heads key/value heads.
  struct Mla {
    uint32_t q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  } mla{};
  bool fp8 = false;  // the linear layers' GEMMs in FP8; attention core, router and output head stay bf16
};

struct Devices {
  uint32_t count = 0;
  uint32_t per_node = 8;  // devices joined by the intra-node links
  double memory_gib = 80;
  double peak_tflops = 0;      // the denominator of MFU
  double gemm_tflops = 0;      // large bf16/fp16 GEMM rate (0: Efficiency::gemm x peak)
  double fp8_gemm_tflops = 0;  // FP8 GEMM rate (0: twice the bf16 rate, the peaks' ratio)
  double intra_gbps = 300;     // GB/s per device, one direction, inside a node
  double inter_gbps = 25;      // GB/s per device, one direction, between nodes
  // Early-life fabrics: the spread of one exchange's time on a link,
  // measured (standard deviation / mean). A synchronous exchange among n
  // ranks waits for the slowest: it costs 1 + noise x sqrt(2 ln n) times
  // its mean.
  double intra_noise = 0, inter_noise = 0;
  // Devices held out of the layout as spares (at least this many; a search
  // may hold whole nodes more where the rest divides better).
  uint32_t spares = 0;
  // Measured on the job's own communicators through the HAL, where given:
  // the fixed cost of one small collective at each level (0: the
  // Efficiency's latency), and whether the bandwidths above are achieved
  // ones (no link efficiency applied) rather than nominal.
  double intra_latency_us = 0, inter_latency_us = 0;
  bool links_measured = false;
  // The rate the model's own forward and backward reached on one device,
  // every operation counted (not GEMMs alone), in model TFLOP/s. 0: the
  // GEMM rate with the Efficiency's non-GEMM share added.
  double model_tflops = 0;
};

// How much of a link and a device the software gets; one set for every
// model and machine. The defaults are the planner's published parameters
// (docs/parallel.md says where each comes from).
struct Efficiency {
  double gemm = 0.63;           // GEMM rate / peak where the devices give no rate
  double link = 0.70;           // achieved / nominal bandwidth of a collective
  double non_gemm = 0.12;       // time on everything but GEMMs, as a fraction of GEMM time
  double latency_s = 20e-6;     // fixed cost of one collective or send
  double memory_usable = 0.90;  // of the device's memory, for the plan (allocator, buffers)
  // A routed expert's grouped GEMMs run at width / (width + expert_width)
  // of the GEMM rate (narrow, fine-grained experts fill the device less).
  double expert_width = 1664;
  uint32_t gemm_tile = 128;  // rows of a GEMM tile: an expert's token count rounds up to it
};

enum class Recompute { none, selective, full };
// Pipeline schedules: 1F1B (interleaved where Framework::interleaving),
// zero-bubble ZB-H1 (backward split into input and weight gradients), and
// DeepSeek's DualPipe (two directions; one micro-batch's all-to-alls hidden
// behind another's compute; two copies of the weights).
enum class Schedule { one_f_one_b, zero_bubble, dualpipe };
enum class Sharding { none, optimizer, full };  // DDP; ZeRO-1 / distributed optimizer; FSDP / ZeRO-3

// What the training framework does, which the layout does not say.
struct Framework {
  double dp_overlap = 0.5;      // fraction of the gradient exchange hidden behind backward
  bool blocking_p2p = false;    // pipeline sends block and every TP rank sends the whole activation
  bool interleaving = true;     // interleaved (virtual) pipeline stages available
  bool uneven_stages = false;   // stages may hold different layer counts
  bool flash_attention = true;  // attention scores never stored (memory only)
  Schedule schedule = Schedule::one_f_one_b;
  bool ep_overlap = false;  // all-to-alls run under another micro-batch's compute (DualPipe does)
  // A token crosses to each remote node once and the node's links fan it
  // out to the experts there (DeepEP, HybridEP).
  bool node_dispatch = false;
  bool p2p_overlap = false;           // pipeline sends run under the other chunks' compute (but the first)
  double comm_sm_share = 0;           // share of the device's cores given to communication (DualPipe: 20/132)
  bool reshard_after_forward = true;  // full sharding: false keeps the gathered weights until backward
  double adam_bytes = 12;             // optimizer bytes per parameter (fp32 master + two fp32 moments)
  // MoE parallel folding (Megatron-Core): experts are not split by the
  // attention's tensor parallelism, and the expert-parallel group takes the
  // node's ranks first.
  bool moe_folding = false;
};

struct Layout {
  uint32_t tp = 1, pp = 1, dp = 1, ep = 1, cp = 1;
  uint32_t vpp = 1;          // virtual stages per device
  uint32_t micro_batch = 1;  // sequences per micro-batch
  Recompute recompute = Recompute::none;
  Sharding sharding = Sharding::optimizer;
};

struct Score {
  double step_s = 0, mfu = 0, tokens_per_s = 0, memory_gib = 0;
  bool fits = false;
  // Seconds of the step each part takes (exposed).
  double compute_s = 0, tp_s = 0, cp_s = 0, ep_s = 0, pp_s = 0, bubble_s = 0, dp_s = 0;
};

// Model FLOPs of one token, training (forward and backward), no recompute.
SIGMA_EXPORT double model_flops_per_token(const Model& model);
// Throws Error(invalid_argument) naming the field for a model or devices
// that cannot be planned (zero sizes, heads not dividing hidden, ...).
SIGMA_EXPORT void check(const Model& model, const Devices& devices);
// Prices one layout. Pure. The layout must cover the devices
// (tp * pp * dp * cp == count; Error(invalid_argument) otherwise).
SIGMA_EXPORT Score evaluate(const Model& model, const Devices& devices, const Layout& layout,
                            const Framework& framework = {}, const Efficiency& efficiency = {});

// Which layouts a search may try: an empty list is "every value that
// divides"; a given list pins the dimension to those values.
struct Space {
  std::vector<uint32_t> tp{}, pp{}, ep{}, cp{}, vpp{}, micro_batch{};
  std::vector<Recompute> recompute{};
  std::vector<Sharding> sharding{};
  // false: keep layouts the memory model says do not fit too, after those
  // that fit (to price a layout whose memory is in question).
  bool require_fit = true;
  // Experts each rank must have memory for beyond its own, so the MoE
  // autotuner can move a slow rank's experts onto it (0: no such room
  // asked). A layout without that room does not fit.
  uint32_t expert_headroom = 0;
  // The layouts libsigma's runtime runs: tp = cp = 1.
  static Space runtime() {
    Space s;
    s.tp = {1};
    s.cp = {1};
    return s;
  }
};

struct Candidate {
  Layout layout{};
  Score score{};
  uint32_t devices = 0;  // the devices the layout covers (count less the spares held)
  // Experts one rank can hold within its usable memory, its own included:
  // the autotuner's bound when it moves experts off a slow rank
  // (BalancerOptions::max_experts_per_rank). 0 for a dense model.
  uint32_t max_experts_per_rank = 0;
};

// Every layout of `space` that fits, best (shortest step) first; at most
// `keep` of them. Pure; any thread. Empty when none fits (with
// space.require_fit false: those that fit first, then those that do not).
SIGMA_EXPORT std::vector<Candidate> search(const Model& model, const Devices& devices, const Space& space,
                                           const Framework& framework = {}, const Efficiency& efficiency = {},
                                           size_t keep = 5);

SIGMA_EXPORT const char* recompute_name(Recompute r);
SIGMA_EXPORT const char* schedule_name(Schedule s);
SIGMA_EXPORT const char* sharding_name(Sharding s);
// "tp8 pp16 dp64 ep1 cp1 v4 mb1 recompute=none shard=optimizer"
SIGMA_EXPORT std::string describe(const Layout& layout);

// A plan request read from YAML (sigma-plan's input): model, devices,
// framework, efficiency overrides and the search space. Throws Error
// (invalid_argument) with "file:line: key: why" for anything malformed.
struct Request {
  Model model{};
  Devices devices{};
  Framework framework{};
  Efficiency efficiency{};
  Space space{};
  size_t top = 5;
};
SIGMA_EXPORT Request parse_request(const std::string& yaml_text, const std::string& file_name);

// A search's result as one JSON object: model, devices, search_s,
// model_flops_per_token and "plans" (best first: layout, step_s,
// tokens_per_s, mfu, memory_gib, fits, breakdown_s). Pure; any thread.
SIGMA_EXPORT std::string plans_json(const Request& request, const std::vector<Candidate>& best,
                                    double search_s);
// A request's YAML in, the search's plans_json() out (top: how many plans,
// 0 for the request's). What the C API and the Python module answer.
// Throws Error(invalid_argument) "name:line: key: why" for a bad request.
SIGMA_EXPORT std::string plan_json(const std::string& yaml_text, const std::string& name, size_t top = 0);

}  // namespace sigma::planner
