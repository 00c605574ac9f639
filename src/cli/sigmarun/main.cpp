// sigmarun: runs a training job with one worker process per device, warm
// spares, health monitoring and failure-aware recovery.
//
//   sigmarun --nproc N [--spares S] [--vendor NAME] [--vendor-options STR]
//            --job-dir DIR [--store redis://HOST:PORT] [options] -- WORKER ARGS...
//
// Several hosts: start one agent per host with the same --store, --job-id,
// --nnodes K and worker; --node-rank 0 is the root (it decides, journals
// and reports), the others start and watch their host's workers for it.
// Under Slurm, `srun --ntasks-per-node=1 sigmarun ...` does that with no
// such flags: each task takes them from Slurm's environment (slurm.hpp).
//
// Writes DIR/incidents.jsonl (the incident journal), DIR/report.json (status,
// incidents, goodput ledger, devices, the step and device series, and the
// summary), DIR/report.html (the same with charts: docs/report.md) and
// DIR/logs/device-N.log (each worker's output). Exit status: 0 done, 2 bad usage or could not start,
// 3 paused (no spare left), 4 unrecoverable (the report says why), 128 + N
// stopped by signal N (SIGTERM, SIGINT: at a step boundary, resumable).
#include <sigma/agent.hpp>
#include <sigma/error.hpp>

#include "report/figures.hpp"
#include "slurm.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

namespace {

// What the command line gives: the agent's options and what only sigmarun uses.
struct Cli {
  sigma::runtime::AgentOptions o;
  double tier_memory_mib = 0;
  std::string secret_file;
  std::string reference;
  std::vector<std::pair<std::string, std::string>> compare;  // --report-compare
  bool report = true;
  bool slurm = true;
};

// The job's shape: ranks, spares, vendor, hosts, failure domains, the store.
void add_job_flags(CLI::App& app, Cli& c) {
  app.add_option("--nproc", c.o.nproc, "worker processes (ranks), one per device")
      ->required()
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--spares", c.o.spares, "warm spare devices kept validated and waiting")
      ->check(CLI::Range(0u, 4096u));
  app.add_option("--vendor", c.o.vendor, "HAL plugin name or path (cpu, sim, cuda, ...)");
  app.add_option("--vendor-options", c.o.vendor_options,
                 "the plugin's options, given to every worker; {device} becomes its device number");
  app.add_option("--health-time-scale", c.o.health_time_scale,
                 "device seconds per wall second for the health monitor's windows and rates "
                 "(a simulated device that runs its clock faster)")
      ->check(CLI::PositiveNumber);
  app.add_option("--nnodes", c.o.nnodes,
                 "agents (hosts) in the job; each runs --nproc ranks and --spares spares")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--node-rank", c.o.node_rank, "this agent's node: 0 is the root, the others follow it");
  app.add_option("--nodes-per-group", c.o.nodes_per_group,
                 "a group controller per this many agents: it replaces and migrates within its group and "
                 "escalates to the root only a fault it has no spare for (0: one group)")
      ->check(CLI::Range(0u, 4096u));
  app.add_option("--devices-per-node", c.o.devices_per_node,
                 "failure domains: each host's devices (its ranks, then its spares) make nodes of this many, "
                 "and the memory tier keeps every rank's replica in another node (0: a host is one node)")
      ->check(CLI::Range(0u, 4096u));
  app.add_option("--replicas", c.o.replicas,
                 "memory-tier copies of each rank's snapshots, each held in another failure domain where "
                 "the domains allow (1 or 2)")
      ->check(CLI::Range(1u, 2u));
  app.add_option("--rack", c.o.rack,
                 "this host's rack (switch): when every host names one, the memory tier keeps replicas in "
                 "another rack first (under Slurm: SLURM_TOPOLOGY_ADDR without its node)");
  app.add_option("--tier-memory", c.tier_memory_mib,
                 "MiB of each host's memory its ranks' memory tiers may take; a job that needs more is "
                 "refused before it starts, with the numbers (default: the host's available memory)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--host", c.o.host,
                 "the address other hosts reach the root agent at (default: this host's name)");
  app.add_option("--job-id", c.o.job_id, "names the job in the store (default: the job folder's name)");
  app.add_option(
      "--secret-file", c.secret_file,
      "the per-job secret (a file only its owner can read; default: $SIGMA_JOB_SECRET), needed with "
      "several agents: the root and every message between hosts are authenticated with it");
  app.add_option("--job-dir", c.o.job_dir, "job folder: journal, report, logs, store, checkpoints")
      ->required();
  app.add_option("--store", c.o.store,
                 "rendezvous store (redis://host:port); default: a file store in the job folder");
}

// Detection, recovery and the state it restores from.
void add_recovery_flags(CLI::App& app, Cli& c) {
  app.add_option("--heartbeat", c.o.heartbeat_s, "worker heartbeat period in seconds")
      ->check(CLI::Range(0.001, 60.0));
  app.add_option("--heartbeat-timeout", c.o.heartbeat_timeout_s, "a worker silent this long is hung")
      ->check(CLI::Range(0.01, 3600.0));
  app.add_option("--step-timeout", c.o.step_timeout_s,
                 "no step completed for this long while workers still beat: a stuck collective (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--straggler-steps", c.o.straggler_min_steps,
                 "steps of a device's times the straggler rule sees before it warns (fewer: sooner, on less "
                 "evidence)")
      ->check(CLI::Range(2u, 50u));
  app.add_option("--abort-grace", c.o.abort_grace_s,
                 "survivors must report within this after a recovery's abort, or are replaced as hung")
      ->check(CLI::PositiveNumber);
  app.add_option(
         "--validate-timeout", c.o.validate_timeout_s,
         "start without devices still validating after this; a follower waits twice this for its root")
      ->check(CLI::PositiveNumber);
  app.add_option("--recovery-timeout", c.o.recovery_timeout_s,
                 "a rank that has not joined the new generation this long after a recovery's assignment "
                 "is replaced")
      ->check(CLI::PositiveNumber);
  app.add_option("--snapshot-every", c.o.snapshot_every, "memory-tier snapshot period in steps")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--checkpoint-every", c.o.checkpoint_every, "disk checkpoint period in steps (0: none)");
  app.add_option("--snapshot-keep", c.o.snapshot_keep,
                 "memory-tier snapshots each rank keeps (of its own and of each replica)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--checkpoint-base-every", c.o.checkpoint_base_every,
                 "a full disk checkpoint every K; the others are differential")
      ->check(CLI::Range(1u, 1000000u));
  app.add_flag("--checkpoint-async", c.o.checkpoint_async,
               "write disk checkpoints in the background while training goes on (the agent counts each once "
               "it is durable)");
  app.add_option("--checkpoint-keep", c.o.checkpoint_keep, "newest disk checkpoints kept (with their bases)")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--metrics-port", c.o.metrics_port,
                 "serve Prometheus /metrics on 127.0.0.1:PORT (0: any free port)")
      ->check(CLI::Range(-1, 65535));
  app.add_flag("!--no-progress", c.o.progress, "no progress line on stderr");
  app.add_flag("!--no-migration", c.o.proactive_migration, "no proactive migration on early warnings");
  app.add_option("--readmit-crashed", c.o.readmit_crashed,
                 "validate a device again after its worker process crashed, at most N times; it waits as a "
                 "spare when it passes (0: it stays cordoned)")
      ->check(CLI::Range(0u, 1000u));
  app.add_option("--recovery", c.o.recovery,
                 "exact: every fault stops every rank and all restore (bitwise a fault-free run); contained: "
                 "a fault stops only its data-parallel replica of --replica-size ranks while the others step "
                 "on, and its ranks take live state from a healthy replica")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, sigma::runtime::AgentOptions::Recovery>{
              {"exact", sigma::runtime::AgentOptions::Recovery::exact},
              {"contained", sigma::runtime::AgentOptions::Recovery::contained}},
          CLI::ignore_case));
  app.add_option("--replica-size", c.o.replica_size,
                 "ranks per data-parallel replica (the model-parallel group: EP x PP; it divides the world): "
                 "workers form replica and data-parallel groups; contained recovery needs it")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--catch-up-s", c.o.catch_up_s,
                 "contained: a rejoining replica whose replay has not caught up with the live replicas after "
                 "this many seconds rejoins anyway (the live ones wait for it at the boundary)")
      ->check(CLI::PositiveNumber);
  app.add_flag(
      "--allow-shrink", c.o.allow_shrink,
      "with no spare left, go on with fewer ranks (only for a state every rank holds whole: data parallel)");
  app.add_option("--min-ranks", c.o.min_world, "never shrink below this many ranks")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--failure-rate", c.o.failure_rate_per_device_hour,
                 "failures per device-hour, for the spare-pool advice in the report")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repair-hours", c.o.repair_hours, "repair time for the spare advice")
      ->check(CLI::PositiveNumber);
  app.add_option("--job-hours", c.o.job_hours, "job length for the spare advice")->check(CLI::PositiveNumber);
}

// The report and Slurm.
void add_report_flags(CLI::App& app, Cli& c) {
  app.add_option("--report-reference", c.reference,
                 "a fault-free run's job folder: report.html draws its loss beside this job's")
      ->check(CLI::ExistingDirectory);
  app.add_option_function<std::vector<std::string>>(
         "--report-compare",
         [&c](const std::vector<std::string>& v) {
           for (const auto& text : v) {
             try {
               c.compare.push_back(sigma_report::parse_compare(text));
             } catch (const std::invalid_argument& e) {
               throw CLI::ValidationError("--report-compare", e.what());
             }
             if (!std::filesystem::is_directory(c.compare.back().second))
               throw CLI::ValidationError("--report-compare",
                                          "'" + c.compare.back().second + "': no such folder");
           }
         },
         "LABEL=JOB_DIR: another run's loss drawn beside this job's (repeatable)")
      ->allow_extra_args(false);  // one value per flag: the command after it is not swallowed
  app.add_flag("!--no-report", c.report, "no report.html and no summary at the end");
  app.add_flag("!--no-slurm", c.slurm,
               "ignore Slurm's environment (by default, under srun, each task is one agent and takes "
               "--nnodes, --node-rank, --job-id and the root's --host from it)");
}

// Slurm's placement, the secret, and the checks the flags cannot make alone.
// Nonzero: the exit status (the message is out).
int settle(const CLI::App& app, Cli& c) {
  c.o.tier_memory_bytes = static_cast<uint64_t>(c.tier_memory_mib * (1 << 20));
  try {
    const auto task =
        c.slurm ? sigmarun::slurm_task([](const char* name) { return std::getenv(name); }) : std::nullopt;
    if (task) {
      const sigmarun::Given given{app.count("--nnodes") > 0, app.count("--node-rank") > 0,
                                  app.count("--job-id") > 0, app.count("--host") > 0,
                                  app.count("--store") > 0,  app.count("--rack") > 0};
      std::cerr << sigmarun::apply_slurm(c.o, *task, given) << "\n";
    }
  } catch (const sigma::Error& e) {
    std::cerr << "sigmarun: " << e.what() << "\n";
    return 2;
  }
  try {
    if (auto secret = sigma::runtime::read_job_secret(c.secret_file, std::getenv("SIGMA_JOB_SECRET")))
      c.o.secret = *secret;
  } catch (const sigma::Error& e) {
    std::cerr << "sigmarun: " << e.what() << "\n";
    return 2;
  }
  if (c.o.node_rank >= c.o.nnodes) {
    std::cerr << "sigmarun: --node-rank " << c.o.node_rank << " is not below --nnodes " << c.o.nnodes << "\n";
    return 2;
  }
  if (c.o.allow_shrink && c.o.min_world > c.o.nproc * c.o.nnodes) {
    std::cerr << "sigmarun: --min-ranks " << c.o.min_world << " is above the job's " << c.o.nproc * c.o.nnodes
              << " ranks\n";
    return 2;
  }
  const bool contained = c.o.recovery == sigma::runtime::AgentOptions::Recovery::contained;
  if (contained || c.o.replica_size > 0) {
    const uint32_t world = c.o.nproc * c.o.nnodes;
    if (c.o.replica_size == 0 || world % c.o.replica_size != 0) {
      std::cerr << "sigmarun: " << (contained ? "--recovery contained needs " : "")
                << "--replica-size dividing the job's " << world << " ranks (given " << c.o.replica_size
                << ")\n";
      return 2;
    }
    if (c.o.allow_shrink) {
      std::cerr << "sigmarun: replicas of --replica-size ranks keep the world's size: they do not go with "
                   "--allow-shrink\n";
      return 2;
    }
  }
  if (c.o.nnodes > 1 && c.o.store.empty()) {
    std::cerr << "sigmarun: --nnodes " << c.o.nnodes
              << " needs a --store every host reaches (redis://HOST:PORT, or a folder they share)\n";
    return 2;
  }
  return 0;
}

int run(Cli& c) {
  try {
    c.o.job_dir = std::filesystem::absolute(c.o.job_dir).string();
    if (c.o.job_id.empty()) c.o.job_id = std::filesystem::path(c.o.job_dir).filename().string();
    if (c.o.host.empty()) {
      char name[256] = {};
      c.o.host = c.o.nnodes > 1 && ::gethostname(name, sizeof name - 1) == 0 ? name : "127.0.0.1";
    }
    if (c.o.node_rank > 0) return sigma::runtime::run_follower(c.o);
    sigma::runtime::Agent agent(c.o);
    sigma::runtime::stop_agent_on_signals(agent);
    const int status = agent.run();
    if (c.report) {
      try {
        std::cerr << sigma_report::write_report(c.o.job_dir, c.reference, c.compare)
                  << "sigmarun: report: " << c.o.job_dir << "/report.html\n";
      } catch (const std::exception& e) {  // the job's outcome stands; only the page is missing
        std::cerr << "sigmarun: no report.html: " << e.what() << "\n";
      }
    }
    return status;
  } catch (const sigma::Error& e) {
    std::cerr << "sigmarun: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {  // the file system's refusals, named by the library
    std::cerr << "sigmarun: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Cli c;
  CLI::App app{"sigmarun: failure-aware launcher for training jobs on early-life accelerators"};
  add_job_flags(app, c);
  add_recovery_flags(app, c);
  add_report_flags(app, c);
  app.add_option("worker", c.o.worker, "the worker program and its arguments (after --)")->required();
  app.allow_extras(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (const int status = settle(app, c)) return status;
  return run(c);
}
