// sigmarun under Slurm: `srun sigmarun ...` starts one agent per task; each
// takes the job's shape from Slurm's environment instead of flags. Pure:
// an environment lookup in, options and what was taken out.
#pragma once

#include <sigma/agent.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sigmarun {

// One task of a Slurm job step, as its environment says.
struct SlurmTask {
  uint32_t tasks = 1;     // SLURM_STEP_NUM_TASKS (else SLURM_NTASKS): the agents
  uint32_t task = 0;      // SLURM_PROCID: this agent; 0 is the root
  std::string job;        // SLURM_JOB_ID
  std::string step;       // SLURM_STEP_ID
  std::string node_name;  // SLURMD_NODENAME: where this task runs
  uint32_t local_id = 0;  // SLURM_LOCALID: this task among those of its node
  // SLURM_TOPOLOGY_ADDR without its last component (the node): the switch
  // above this node, its rack (empty: no topology plugin, or a flat one).
  std::string rack;
};

using Lookup = std::function<const char*(const char*)>;

// The task this process is, or nullopt outside a job step (no SLURM_JOB_ID,
// SLURM_STEP_ID and SLURM_PROCID: not started by srun). Throws
// sigma::Error(invalid_argument) naming a variable that is malformed.
std::optional<SlurmTask> slurm_task(const Lookup& env);

// Which of the options Slurm could fill the command line set itself.
struct Given {
  bool nnodes = false, node_rank = false, job_id = false, host = false, store = false, rack = false;
};

// Fills from the task what the command line left unset: --nnodes (the
// step's tasks), --node-rank (this task), --job-id ("slurm-JOB.STEP") and,
// with several agents, the root's --host (its node name), a --store in the
// job folder (which the nodes must then share), a follower's own folder
// below it (node-K: a job folder has one agent) and --rack (the switch
// above the node, from Slurm's topology). A command line that
// places the agent itself (--nnodes or --node-rank) is left as it is.
// Returns one line saying what was taken.
std::string apply_slurm(sigma::runtime::AgentOptions& o, const SlurmTask& task, const Given& given);

}  // namespace sigmarun
