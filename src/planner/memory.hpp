// The memory model (memory.cpp): bytes one device holds for a layout.
#pragma once

#include "shape.hpp"

namespace sigma::planner::detail {

// The parameters one device holds: dense ones split over tp x pp, routed
// experts over (tp unless folded) x pp x ep; expert_dp ranks share each
// expert's gradients and optimizer states.
struct Held {
  double dense = 0, expert = 0, expert_dp = 1;
};
Held held_params(const Shape& s, const Layout& l, const Framework& f);

// Layers on the stage that keeps the most in flight (the first).
double stage_layers(const Shape& s, const Layout& l, const Framework& f);
// Micro-batches of that stage's layers the schedule keeps for backward.
double micro_batches_in_flight(const Layout& l, const Framework& f);
// Bytes one layer keeps for backward per micro-batch on one device.
double layer_activation_bytes(const Model& m, const Shape& s, const Layout& l, bool flash);
// Weights, gradients, optimizer states and activations on the device.
double memory_bytes(const Model& m, const Shape& s, const Layout& l, const Framework& f);

// Experts one rank can hold, its own included, with `free_bytes` of its
// usable memory left (0 for a dense model or no expert parallelism).
uint32_t experts_within_memory(const Model& m, const Shape& s, const Layout& l, const Framework& f,
                               double free_bytes);

}  // namespace sigma::planner::detail
