// The report's charts as SVG text (PLplot's SVG driver). Each call draws
// through the file `scratch` (written and removed). Not thread-safe:
// PLplot keeps global state.
#pragma once

#include "figures.hpp"

#include <string>

namespace sigma_report {

std::string loss_chart(const Figures& f, const std::string& scratch);
std::string step_time_chart(const Figures& f, const std::string& scratch);
std::string temperature_chart(const Figures& f, const std::string& scratch);
std::string timeline_chart(const Figures& f, const std::string& scratch);
std::string goodput_chart(const Figures& f, const std::string& scratch);
std::string precision_chart(const Figures& f, const std::string& scratch);

}  // namespace sigma_report
