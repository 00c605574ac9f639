// The trainer's layout from the planner, and what the planner is told about
// this machine: a GEMM rate and the model's own compute rate, each measured
// on one core, and the links measured through the HAL once the job's
// communicator exists.
#pragma once

#include "model.hpp"

#include <sigma/hal.hpp>
#include <sigma/parallel.hpp>
#include <sigma/planner.hpp>

#include <cstdint>
#include <string>

namespace moe {

// One worker alone on a core, in GFLOP/s.
struct Rates {
  double gemm_gflops = 0;   // a 512 x 512 GEMM: MFU's peak
  double model_gflops = 0;  // this model's whole step (every op, model FLOPs); 0: not measured
};
double measure_gemm_gflops();
// Runs the model alone (all experts here, a communicator of one on the cpu
// vendor) for a few steps of `batch` sequences, forward, backward and AdamW.
double measure_model_gflops(const ModelConfig& config, int64_t batch, uint64_t seed);

// What one small collective costs and what a large one moves, measured on
// `comm` through the HAL. Collective: every rank calls it.
struct Links {
  double latency_us = 0, gbps = 0;
};
Links probe_links(sigma::hal::Communicator& comm, const sigma::hal::PluginPtr& plugin, uint32_t world);

struct Chosen {
  sigma::parallel::Layout layout;
  sigma::planner::Model model;
  sigma::planner::Devices devices;
  sigma::planner::Layout planned;
  sigma::planner::Framework framework;
  double predicted_step_s = 0, flops_per_token = 0;
  std::string describe;
};
// Data parallel over the world, experts sharded (ep >= 2) as the planner
// scores best for this model; the workers share the machine's cores. With
// `ep` given (not 0) the expert groups are pinned to it: sigmarun's
// replica groups (--replica-size) are the expert groups.
Chosen plan_layout(const ModelConfig& config, int64_t batch, uint32_t world, const Rates& rates,
                   uint32_t ep = 0);
// The chosen layout priced again with the measured links.
double predict_with_links(const Chosen& chosen, const Links& links);

}  // namespace moe
