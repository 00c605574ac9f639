// For the tests that need a GPU: skip only on a machine without one (no
// device, no driver), fail on one whose CUDA is broken, and fail on a
// machine that must have one (SIGMA_REQUIRE_GPU=1, set by
// tests/device/run.sh) but has none.
#pragma once

#include "presence.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#define SIGMA_REQUIRE_GPU()                                                       \
  do {                                                                            \
    const sigma_cuda::GpuPresence gpu_ = sigma_cuda::probe_gpu();                 \
    if (gpu_.presence == sigma_cuda::Presence::broken)                            \
      FAIL() << "a GPU driver is installed but CUDA cannot use it: " << gpu_.why; \
    if (gpu_.presence == sigma_cuda::Presence::none) {                            \
      if (std::getenv("SIGMA_REQUIRE_GPU") != nullptr)                            \
        FAIL() << "SIGMA_REQUIRE_GPU is set, but " << gpu_.why;                   \
      GTEST_SKIP() << "skipped: no CUDA device (" << gpu_.why << ")";             \
    }                                                                             \
  } while (0)
