#include "slurm.hpp"

#include <sigma/error.hpp>

#include <charconv>
#include <filesystem>

namespace sigmarun {

using sigma::Code;
using sigma::Error;

namespace {

uint32_t number(const Lookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr) throw Error(Code::invalid_argument, std::string("Slurm's ") + name + " is not set");
  uint32_t out = 0;
  const char* end = v + std::char_traits<char>::length(v);
  const auto r = std::from_chars(v, end, out);
  if (r.ec != std::errc() || r.ptr != end || v == end)
    throw Error(Code::invalid_argument, std::string("Slurm's ") + name + " is '" + v + "', not a number");
  return out;
}

}  // namespace

std::optional<SlurmTask> slurm_task(const Lookup& env) {
  if (!env("SLURM_JOB_ID") || !env("SLURM_STEP_ID") || !env("SLURM_PROCID")) return std::nullopt;
  SlurmTask t;
  t.job = env("SLURM_JOB_ID");
  t.step = env("SLURM_STEP_ID");
  t.task = number(env, "SLURM_PROCID");
  t.tasks = number(env, env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS");
  if (t.tasks == 0 || t.task >= t.tasks)
    throw Error(Code::invalid_argument, "Slurm's SLURM_PROCID " + std::to_string(t.task) +
                                            " is not below its " + std::to_string(t.tasks) + " tasks");
  if (const char* n = env("SLURMD_NODENAME")) t.node_name = n;
  if (env("SLURM_LOCALID")) t.local_id = number(env, "SLURM_LOCALID");
  if (const char* a = env("SLURM_TOPOLOGY_ADDR")) {
    const std::string addr = a;
    const auto dot = addr.rfind('.');
    if (dot != std::string::npos && dot > 0) t.rack = addr.substr(0, dot);
  }
  return t;
}

std::string apply_slurm(sigma::runtime::AgentOptions& o, const SlurmTask& t, const Given& given) {
  const std::string where = "sigmarun: Slurm job " + t.job + " step " + t.step;
  if (given.nnodes || given.node_rank)  // placed by hand inside a step: as told
    return where + ": --nnodes/--node-rank given, Slurm's placement not used";
  o.nnodes = t.tasks;
  o.node_rank = t.task;
  if (!given.job_id) o.job_id = "slurm-" + t.job + "." + t.step;
  if (!given.rack && !t.rack.empty()) o.rack = t.rack;
  const std::string shared = std::filesystem::absolute(o.job_dir).string();
  if (o.nnodes > 1) {
    if (!given.host && o.node_rank == 0 && !t.node_name.empty()) o.host = t.node_name;
    if (!given.store) o.store = shared + "/store";
    if (o.node_rank > 0) o.job_dir = shared + "/node-" + std::to_string(o.node_rank);
  }
  std::string line = where + ": agent " + std::to_string(o.node_rank) + " of " + std::to_string(o.nnodes) +
                     (t.node_name.empty() ? "" : " on " + t.node_name) + ", job id " + o.job_id +
                     (o.nnodes > 1 ? ", store " + o.store : "") + (o.rack.empty() ? "" : ", rack " + o.rack);
  if (t.local_id > 0)
    line +=
        " (not the first agent on this node: each runs --nproc workers on the node's devices; "
        "srun --ntasks-per-node=1 gives one agent per node)";
  return line;
}

}  // namespace sigmarun
