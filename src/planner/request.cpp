// sigma-plan's input: a YAML request read strictly (unknown keys, wrong
// types and out-of-range values refused with file, line and key).
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include "yaml_reader.hpp"

namespace sigma::planner {

namespace {

using yaml::Reader;

void read_mla(const Reader& r, const YAML::Node& n, Model::Mla& a) {
  r.only_keys(n, "model.mla", {"q_lora", "kv_lora", "qk_nope", "qk_rope", "v_head"});
  const auto u32 = [&](const char* key, uint32_t& out, uint64_t lo, bool required) {
    if (n[key])
      out = static_cast<uint32_t>(r.integer(n[key], std::string("model.mla.") + key, lo, 1u << 20));
    else if (required)
      r.fail(n, std::string("model.mla.") + key, "missing");
  };
  u32("q_lora", a.q_lora, 0, false);
  u32("kv_lora", a.kv_lora, 1, true);
  u32("qk_nope", a.qk_nope, 0, true);
  u32("qk_rope", a.qk_rope, 0, true);
  u32("v_head", a.v_head, 1, true);
  if (a.qk_nope + a.qk_rope == 0) r.fail(n, "model.mla.qk_nope", "qk_nope and qk_rope are both 0");
}

void read_model(const Reader& r, const YAML::Node& n, Model& m) {
  r.only_keys(n, "model",
              {"name",
               "layers",
               "hidden",
               "ffn",
               "heads",
               "kv_heads",
               "vocab",
               "experts",
               "top_k",
               "seq",
               "global_batch",
               "gated_ffn",
               "parallel_block",
               "bytes_per_param",
               "head_dim",
               "expert_ffn",
               "shared_experts",
               "shared_ffn",
               "dense_layers",
               "max_nodes",
               "mtp_depth",
               "mla",
               "fp8"});
  const auto u32 = [&](const char* key, uint32_t& out, uint64_t lo, uint64_t hi, bool required) {
    if (n[key])
      out = static_cast<uint32_t>(r.integer(n[key], std::string("model.") + key, lo, hi));
    else if (required)
      r.fail(n, std::string("model.") + key, "missing");
  };
  if (n["name"]) m.name = r.text(n["name"], "model.name");
  u32("layers", m.layers, 1, 100000, true);
  u32("hidden", m.hidden, 1, 1u << 20, true);
  u32("ffn", m.ffn, 1, 1u << 24, true);
  u32("heads", m.heads, 1, 1u << 16, true);
  m.kv_heads = m.heads;
  u32("kv_heads", m.kv_heads, 1, 1u << 16, false);
  u32("vocab", m.vocab, 1, 1u << 24, true);
  u32("experts", m.experts, 1, 1u << 16, false);
  u32("top_k", m.top_k, 1, 1u << 16, false);
  u32("seq", m.seq, 1, 1u << 24, true);
  u32("bytes_per_param", m.bytes_per_param, 1, 8, false);
  if (!n["global_batch"]) r.fail(n, "model.global_batch", "missing");
  m.global_batch = r.integer(n["global_batch"], "model.global_batch", 1, uint64_t{1} << 32);
  if (n["gated_ffn"]) m.gated_ffn = r.boolean(n["gated_ffn"], "model.gated_ffn");
  if (n["parallel_block"]) m.parallel_block = r.boolean(n["parallel_block"], "model.parallel_block");
  u32("head_dim", m.head_dim, 1, 1u << 16, false);
  u32("expert_ffn", m.expert_ffn, 1, 1u << 24, false);
  u32("shared_experts", m.shared_experts, 0, 1u << 16, false);
  u32("shared_ffn", m.shared_ffn, 1, 1u << 24, false);
  u32("dense_layers", m.dense_layers, 0, m.layers, false);
  u32("max_nodes", m.max_nodes, 1, 1u << 16, false);
  u32("mtp_depth", m.mtp_depth, 0, 64, false);
  if (n["fp8"]) m.fp8 = r.boolean(n["fp8"], "model.fp8");
  if (n["mla"]) read_mla(r, n["mla"], m.mla);
  if (m.head_dim == 0 && m.hidden % m.heads)
    r.fail(n["heads"], "model.heads", "must divide hidden (or give head_dim)");
  if (m.heads % m.kv_heads) r.fail(n["kv_heads"], "model.kv_heads", "must divide heads");
  if (m.top_k > m.experts) r.fail(n["top_k"], "model.top_k", "more than the experts");
}

void read_devices(const Reader& r, const YAML::Node& n, Devices& d) {
  r.only_keys(n, "devices",
              {"count", "per_node", "memory_gib", "peak_tflops", "gemm_tflops", "fp8_gemm_tflops",
               "intra_gbps", "inter_gbps", "intra_latency_us", "inter_latency_us", "links_measured",
               "model_tflops", "intra_noise", "inter_noise", "spares"});
  if (!n["count"]) r.fail(n, "devices.count", "missing");
  if (!n["peak_tflops"]) r.fail(n, "devices.peak_tflops", "missing");
  d.count = static_cast<uint32_t>(r.integer(n["count"], "devices.count", 1, 1u << 24));
  if (n["per_node"])
    d.per_node = static_cast<uint32_t>(r.integer(n["per_node"], "devices.per_node", 1, 1u << 16));
  d.peak_tflops = r.number(n["peak_tflops"], "devices.peak_tflops", 1e-6, 1e9);
  if (n["gemm_tflops"])
    d.gemm_tflops = r.number(n["gemm_tflops"], "devices.gemm_tflops", 1e-6, d.peak_tflops);
  if (n["fp8_gemm_tflops"])
    d.fp8_gemm_tflops = r.number(n["fp8_gemm_tflops"], "devices.fp8_gemm_tflops", 1e-6, 1e9);
  if (n["memory_gib"]) d.memory_gib = r.number(n["memory_gib"], "devices.memory_gib", 1e-3, 1e9);
  if (n["intra_gbps"]) d.intra_gbps = r.number(n["intra_gbps"], "devices.intra_gbps", 1e-6, 1e9);
  if (n["inter_gbps"]) d.inter_gbps = r.number(n["inter_gbps"], "devices.inter_gbps", 1e-6, 1e9);
  if (n["intra_latency_us"])
    d.intra_latency_us = r.number(n["intra_latency_us"], "devices.intra_latency_us", 0, 1e7);
  if (n["inter_latency_us"])
    d.inter_latency_us = r.number(n["inter_latency_us"], "devices.inter_latency_us", 0, 1e7);
  if (n["intra_noise"]) d.intra_noise = r.number(n["intra_noise"], "devices.intra_noise", 0, 10);
  if (n["inter_noise"]) d.inter_noise = r.number(n["inter_noise"], "devices.inter_noise", 0, 10);
  if (n["spares"]) d.spares = static_cast<uint32_t>(r.integer(n["spares"], "devices.spares", 0, d.count - 1));
  if (n["links_measured"]) d.links_measured = r.boolean(n["links_measured"], "devices.links_measured");
  if (n["model_tflops"])
    d.model_tflops = r.number(n["model_tflops"], "devices.model_tflops", 1e-6, d.peak_tflops);
}

template <typename T>
std::vector<T> names(const Reader& r, const YAML::Node& n, const std::string& key,
                     std::initializer_list<std::pair<const char*, T>> known) {
  std::vector<T> out;
  if (!n) return out;
  std::vector<YAML::Node> items;
  if (n.IsSequence())
    for (const auto& x : n) items.push_back(x);
  else
    items.push_back(n);
  for (const auto& x : items) {
    const std::string v = r.text(x, key);
    bool ok = false;
    std::string all;
    for (const auto& [name, value] : known) {
      if (v == name) {
        out.push_back(value);
        ok = true;
      }
      all += std::string(all.empty() ? "" : ", ") + name;
    }
    if (!ok) r.fail(x, key, "'" + v + "' is not one of " + all);
  }
  return out;
}

void read_framework(const Reader& r, const YAML::Node& n, Framework& f) {
  r.only_keys(n, "framework",
              {"dp_overlap", "blocking_p2p", "interleaving", "uneven_stages", "flash_attention", "schedule",
               "ep_overlap", "p2p_overlap", "node_dispatch", "comm_sm_share", "reshard_after_forward",
               "adam_bytes", "moe_folding"});
  if (n["dp_overlap"]) f.dp_overlap = r.number(n["dp_overlap"], "framework.dp_overlap", 0, 1);
  if (n["blocking_p2p"]) f.blocking_p2p = r.boolean(n["blocking_p2p"], "framework.blocking_p2p");
  if (n["interleaving"]) f.interleaving = r.boolean(n["interleaving"], "framework.interleaving");
  if (n["uneven_stages"]) f.uneven_stages = r.boolean(n["uneven_stages"], "framework.uneven_stages");
  if (n["flash_attention"]) f.flash_attention = r.boolean(n["flash_attention"], "framework.flash_attention");
  if (n["schedule"] && !n["schedule"].IsScalar()) r.fail(n["schedule"], "framework.schedule", "one name");
  if (n["schedule"])
    f.schedule = names<Schedule>(r, n["schedule"], "framework.schedule",
                                 {{"1f1b", Schedule::one_f_one_b},
                                  {"zero_bubble", Schedule::zero_bubble},
                                  {"dualpipe", Schedule::dualpipe}})
                     .back();
  if (n["node_dispatch"]) f.node_dispatch = r.boolean(n["node_dispatch"], "framework.node_dispatch");
  if (n["p2p_overlap"]) f.p2p_overlap = r.boolean(n["p2p_overlap"], "framework.p2p_overlap");
  if (n["ep_overlap"]) f.ep_overlap = r.boolean(n["ep_overlap"], "framework.ep_overlap");
  if (n["comm_sm_share"]) f.comm_sm_share = r.number(n["comm_sm_share"], "framework.comm_sm_share", 0, 0.9);
  if (n["reshard_after_forward"])
    f.reshard_after_forward = r.boolean(n["reshard_after_forward"], "framework.reshard_after_forward");
  if (n["adam_bytes"]) f.adam_bytes = r.number(n["adam_bytes"], "framework.adam_bytes", 0, 64);
  if (n["moe_folding"]) f.moe_folding = r.boolean(n["moe_folding"], "framework.moe_folding");
}

void read_efficiency(const Reader& r, const YAML::Node& n, Efficiency& e) {
  r.only_keys(n, "efficiency",
              {"gemm", "expert_width", "link", "non_gemm", "latency_us", "memory_usable", "gemm_tile"});
  if (n["expert_width"]) e.expert_width = r.number(n["expert_width"], "efficiency.expert_width", 0, 1e6);
  if (n["gemm"]) e.gemm = r.number(n["gemm"], "efficiency.gemm", 1e-3, 1);
  if (n["gemm_tile"])
    e.gemm_tile = static_cast<uint32_t>(r.integer(n["gemm_tile"], "efficiency.gemm_tile", 1, 4096));
  if (n["link"]) e.link = r.number(n["link"], "efficiency.link", 1e-3, 1);
  if (n["non_gemm"]) e.non_gemm = r.number(n["non_gemm"], "efficiency.non_gemm", 0, 100);
  if (n["latency_us"]) e.latency_s = r.number(n["latency_us"], "efficiency.latency_us", 0, 1e7) * 1e-6;
  if (n["memory_usable"]) e.memory_usable = r.number(n["memory_usable"], "efficiency.memory_usable", 1e-3, 1);
}

std::vector<uint32_t> degrees(const Reader& r, const YAML::Node& n, const std::string& key) {
  std::vector<uint32_t> out;
  if (!n) return out;
  if (n.IsScalar()) return {static_cast<uint32_t>(r.integer(n, key, 1, 1u << 24))};
  if (!n.IsSequence()) r.fail(n, key, "a number or a list of numbers");
  for (const auto& x : n) out.push_back(static_cast<uint32_t>(r.integer(x, key, 1, 1u << 24)));
  return out;
}

void read_search(const Reader& r, const YAML::Node& n, Request& q) {
  r.only_keys(n, "search",
              {"tp", "pp", "ep", "cp", "vpp", "micro_batch", "recompute", "sharding", "top", "runtime",
               "require_fit", "expert_headroom"});
  if (n["runtime"] && r.boolean(n["runtime"], "search.runtime")) q.space = Space::runtime();
  if (n["tp"]) q.space.tp = degrees(r, n["tp"], "search.tp");
  if (n["pp"]) q.space.pp = degrees(r, n["pp"], "search.pp");
  if (n["ep"]) q.space.ep = degrees(r, n["ep"], "search.ep");
  if (n["cp"]) q.space.cp = degrees(r, n["cp"], "search.cp");
  q.space.vpp = degrees(r, n["vpp"], "search.vpp");
  q.space.micro_batch = degrees(r, n["micro_batch"], "search.micro_batch");
  q.space.recompute = names<Recompute>(
      r, n["recompute"], "search.recompute",
      {{"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}});
  q.space.sharding = names<Sharding>(
      r, n["sharding"], "search.sharding",
      {{"none", Sharding::none}, {"optimizer", Sharding::optimizer}, {"full", Sharding::full}});
  if (n["require_fit"]) q.space.require_fit = r.boolean(n["require_fit"], "search.require_fit");
  if (n["expert_headroom"])
    q.space.expert_headroom =
        static_cast<uint32_t>(r.integer(n["expert_headroom"], "search.expert_headroom", 0, 1u << 16));
  if (n["top"]) q.top = r.integer(n["top"], "search.top", 1, 1000);
}

}  // namespace

Request parse_request(const std::string& text, const std::string& file) {
  try {
    const YAML::Node root = yaml::parse(text, file);
    const Reader r(file);
    r.only_keys(root, "", {"model", "devices", "framework", "efficiency", "search"});
    Request q;
    if (!root["model"]) r.fail(root, "model", "missing");
    if (!root["devices"]) r.fail(root, "devices", "missing");
    read_model(r, root["model"], q.model);
    read_devices(r, root["devices"], q.devices);
    if (root["framework"]) read_framework(r, root["framework"], q.framework);
    if (root["efficiency"]) read_efficiency(r, root["efficiency"], q.efficiency);
    if (root["search"]) read_search(r, root["search"], q);
    return q;
  } catch (const yaml::Refused& e) {
    throw Error(Code::invalid_argument, e.message);
  }
}

}  // namespace sigma::planner
