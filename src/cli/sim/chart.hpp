// sigma-sim's SVG charts, drawn with PLplot: where each policy's
// accelerator time went (one run), and each policy's utilisation across a
// sweep against SIGMA's published 94.45 %.
#pragma once

#include <sigma/sim.hpp>

#include <string>
#include <vector>

namespace sigma_sim {

// Writes `path`; one run draws stacked bars, several (a sweep) draw lines.
// Throws sigma::Error(unavailable) when the file cannot be written.
void write_chart(const std::vector<sigma::sim::Result>& results, const std::string& path);

}  // namespace sigma_sim
