// sigmarun's placement from Slurm's environment (pure: a lookup in, options out).
#include "slurm.hpp"

#include <sigma/error.hpp>

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace {

using Env = std::map<std::string, std::string>;

sigmarun::Lookup lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

Env step(const std::string& procid, const std::string& tasks) {
  return {{"SLURM_JOB_ID", "7"},           {"SLURM_STEP_ID", "3"}, {"SLURM_PROCID", procid},
          {"SLURM_STEP_NUM_TASKS", tasks}, {"SLURM_NTASKS", "99"}, {"SLURMD_NODENAME", "node-a"}};
}

sigma::runtime::AgentOptions options() {
  sigma::runtime::AgentOptions o;
  o.job_dir = "/shared/job";
  return o;
}

TEST(SlurmPlacement, OutsideAJobStepThereIsNone) {
  const Env batch_script{{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "2"}};
  EXPECT_FALSE(sigmarun::slurm_task(lookup(batch_script)));
  EXPECT_FALSE(sigmarun::slurm_task(lookup(Env{})));
}

TEST(SlurmPlacement, EachTaskIsAnAgentAndFollowersGetAFolderOfTheirOwn) {
  const Env env1 = step("1", "2");
  const auto t = sigmarun::slurm_task(lookup(env1));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tasks, 2u);  // the step's tasks, not the job's
  auto o = options();
  const std::string line = sigmarun::apply_slurm(o, *t, {});
  EXPECT_EQ(o.nnodes, 2u);
  EXPECT_EQ(o.node_rank, 1u);
  EXPECT_EQ(o.job_id, "slurm-7.3");
  EXPECT_EQ(o.store, "/shared/job/store");
  EXPECT_EQ(o.job_dir, "/shared/job/node-1");
  EXPECT_TRUE(o.host.empty());
  EXPECT_NE(line.find("agent 1 of 2 on node-a"), std::string::npos) << line;

  const Env env0 = step("0", "2");
  auto root = options();
  sigmarun::apply_slurm(root, *sigmarun::slurm_task(lookup(env0)), {});
  EXPECT_EQ(root.node_rank, 0u);
  EXPECT_EQ(root.host, "node-a");  // where the followers reach it
  EXPECT_EQ(root.job_dir, "/shared/job");
  EXPECT_EQ(root.store, o.store);
}

TEST(SlurmPlacement, TheTopologyAddressNamesTheRackAndAGivenRackWins) {
  Env env = step("1", "2");
  env["SLURM_TOPOLOGY_ADDR"] = "spine0.leaf3.node-b";
  auto o = options();
  const std::string line = sigmarun::apply_slurm(o, *sigmarun::slurm_task(lookup(env)), {});
  EXPECT_EQ(o.rack, "spine0.leaf3");  // the switch above the node
  EXPECT_NE(line.find("rack spine0.leaf3"), std::string::npos) << line;
  auto given = options();
  given.rack = "row-9";
  sigmarun::Given g;
  g.rack = true;
  sigmarun::apply_slurm(given, *sigmarun::slurm_task(lookup(env)), g);
  EXPECT_EQ(given.rack, "row-9");
  env["SLURM_TOPOLOGY_ADDR"] = "node-b";  // a flat topology: no switch above
  auto flat = options();
  sigmarun::apply_slurm(flat, *sigmarun::slurm_task(lookup(env)), {});
  EXPECT_TRUE(flat.rack.empty());
}

TEST(SlurmPlacement, OneTaskIsASingleAgentJobNamedAfterTheStep) {
  const Env env = step("0", "1");
  auto o = options();
  sigmarun::apply_slurm(o, *sigmarun::slurm_task(lookup(env)), {});
  EXPECT_EQ(o.nnodes, 1u);
  EXPECT_EQ(o.job_id, "slurm-7.3");
  EXPECT_TRUE(o.store.empty());  // the job folder's own store
  EXPECT_EQ(o.job_dir, "/shared/job");
}

TEST(SlurmPlacement, TheCommandLineWinsWhereItIsGiven) {
  const Env env = step("1", "2");
  const auto t = *sigmarun::slurm_task(lookup(env));
  auto o = options();
  o.job_id = "mine";
  o.store = "redis://db:6379";
  o.host = "10.0.0.1";
  sigmarun::apply_slurm(o, t, {.job_id = true, .host = true, .store = true});
  EXPECT_EQ(o.job_id, "mine");
  EXPECT_EQ(o.store, "redis://db:6379");
  EXPECT_EQ(o.node_rank, 1u);
  // An agent placed by hand inside a step (an interactive srun shell) keeps
  // its own placement entirely.
  auto manual = options();
  manual.nnodes = 4;
  manual.node_rank = 3;
  const std::string line = sigmarun::apply_slurm(manual, t, {.nnodes = true, .node_rank = true});
  EXPECT_EQ(manual.nnodes, 4u);
  EXPECT_EQ(manual.node_rank, 3u);
  EXPECT_TRUE(manual.job_id.empty());
  EXPECT_EQ(manual.job_dir, "/shared/job");
  EXPECT_NE(line.find("not used"), std::string::npos) << line;
}

TEST(SlurmPlacement, ASecondAgentOnOneNodeIsToldSo) {
  Env env = step("1", "2");
  env["SLURM_LOCALID"] = "1";
  auto o = options();
  const std::string line = sigmarun::apply_slurm(o, *sigmarun::slurm_task(lookup(env)), {});
  EXPECT_NE(line.find("--ntasks-per-node=1"), std::string::npos) << line;
}

TEST(SlurmPlacement, AMalformedVariableIsNamed) {
  Env env = step("x1", "2");
  try {
    sigmarun::slurm_task(lookup(env));
    FAIL() << "accepted";
  } catch (const sigma::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_PROCID is 'x1'"), std::string::npos) << e.what();
  }
  env = step("2", "2");
  EXPECT_THROW(sigmarun::slurm_task(lookup(env)), sigma::Error);
  env = step("0", "2");
  env.erase("SLURM_STEP_NUM_TASKS");
  env.erase("SLURM_NTASKS");
  try {
    sigmarun::slurm_task(lookup(env));
    FAIL() << "accepted";
  } catch (const sigma::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_NTASKS is not set"), std::string::npos) << e.what();
  }
}

}  // namespace
