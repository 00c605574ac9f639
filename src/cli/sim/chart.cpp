#include "chart.hpp"

#include <sigma/error.hpp>

#include <plplot/plplot.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace sigma_sim {
namespace {

// PLplot's colour map 0 slots we set: one per ledger bucket, then ink.
struct Bucket {
  const char* name;
  double sigma::sim::Ledger::*field;
  std::array<int, 3> rgb;
};

constexpr std::array<Bucket, 12> kBuckets{{
    {"productive", &sigma::sim::Ledger::productive, {46, 139, 87}},
    {"lost work", &sigma::sim::Ledger::lost_work, {214, 39, 40}},
    {"detection", &sigma::sim::Ledger::detection, {255, 127, 14}},
    {"restart", &sigma::sim::Ledger::restart, {148, 103, 189}},
    {"restore", &sigma::sim::Ledger::restore, {140, 86, 75}},
    {"checkpoint", &sigma::sim::Ledger::checkpoint, {31, 119, 180}},
    {"migration", &sigma::sim::Ledger::migration, {23, 190, 207}},
    {"paused", &sigma::sim::Ledger::paused, {227, 119, 194}},
    {"degraded replicas", &sigma::sim::Ledger::degraded, {174, 199, 232}},
    {"slowed", &sigma::sim::Ledger::slow, {255, 187, 120}},
    {"idle spares", &sigma::sim::Ledger::spare, {188, 189, 34}},
    {"in repair", &sigma::sim::Ledger::repair, {127, 127, 127}},
}};
constexpr int kInk = 13, kGrid = 14, kPaper = 15;

void palette() {
  plscol0(0, 255, 255, 255);  // background
  for (size_t i = 0; i < kBuckets.size(); ++i)
    plscol0(static_cast<PLINT>(i + 1), kBuckets[i].rgb[0], kBuckets[i].rgb[1], kBuckets[i].rgb[2]);
  plscol0(kInk, 0, 0, 0);
  plscol0(kGrid, 200, 200, 200);
  plscol0(kPaper, 255, 255, 255);
}

void box(double x0, double x1, double y0, double y1) {
  PLFLT x[4] = {x0, x0, x1, x1}, y[4] = {y0, y1, y1, y0};
  plfill(4, x, y);
}

// One horizontal bar per policy, split by where its accelerator-seconds went.
void ledger_bars(const sigma::sim::Result& r) {
  const auto& ps = r.policies;
  const double n = static_cast<double>(ps.size());
  // The axis starts below the least productive policy: the rest is the story.
  double lo = 100;
  for (const auto& p : ps) lo = std::min(lo, 100 * p.ledger.productive / std::max(p.ledger.total(), 1e-9));
  lo = std::max(0.0, std::floor(lo / 10) * 10 - 10);
  plcol0(kInk);
  pladv(0);
  plvpor(0.05, 0.78, 0.12, 0.9);
  plwind(lo, 100, -0.6, n - 0.4);
  plbox("bcnst", 5, 5, "bc", 0, 0);
  char title[200];
  std::snprintf(title, sizeof title, "%u accelerators x %.0f days: where accelerator time went",
                r.scenario.accelerators, r.scenario.days);
  const std::string axis = "% of accelerator time (from " + std::to_string(static_cast<int>(lo)) + "%)";
  pllab(axis.c_str(), "", title);
  for (size_t i = 0; i < ps.size(); ++i) {
    const double y = n - 1 - static_cast<double>(i), total = std::max(ps[i].ledger.total(), 1e-9);
    double x = 0;
    for (size_t b = 0; b < kBuckets.size(); ++b) {
      const double w = 100 * (ps[i].ledger.*(kBuckets[b].field)) / total;
      plcol0(static_cast<PLINT>(b + 1));
      box(std::max(x, lo), x + w, y - 0.3, y + 0.3);
      x += w;
    }
    char label[160];
    std::snprintf(label, sizeof label, "%s: %.2f%% utilised, ETTR %.2f%%", ps[i].policy.c_str(),
                  100 * ps[i].utilization, 100 * ps[i].ettr);
    plcol0(kPaper);
    plptex(lo + 0.01 * (100 - lo), y - 0.05, 1, 0, 0, label);
  }
  // The legend: a swatch and a name per bucket, below the plot.
  PLINT opt[kBuckets.size()], colors[kBuckets.size()], styles[kBuckets.size()];
  PLFLT scales[kBuckets.size()], widths[kBuckets.size()];
  const char* names[kBuckets.size()];
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    opt[b] = PL_LEGEND_COLOR_BOX;
    colors[b] = static_cast<PLINT>(b + 1);
    styles[b] = 0;
    scales[b] = 0.8;
    widths[b] = 1;
    names[b] = kBuckets[b].name;
  }
  PLFLT w = 0, h = 0;
  std::array<PLINT, kBuckets.size()> ink;
  ink.fill(kInk);
  pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, PL_POSITION_OUTSIDE | PL_POSITION_RIGHT,
           0.02, 0, 0.04, 0, kInk, 1, static_cast<PLINT>(kBuckets.size()), 1,
           static_cast<PLINT>(kBuckets.size()), opt, 0.5, 0.7, 2.0, 0.0, ink.data(), names, colors, styles,
           scales, widths, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
}

// Each policy's utilisation at every sweep point, points ordered by the
// sigma-paper policy's (or the first policy's) utilisation.
void sweep_lines(const std::vector<sigma::sim::Result>& rs) {
  const size_t np = rs.front().policies.size();
  size_t ref = 0;
  for (size_t p = 0; p < np; ++p)
    if (rs.front().policies[p].policy == "sigma-paper") ref = p;
  std::vector<size_t> order(rs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rs[a].policies[ref].utilization < rs[b].policies[ref].utilization;
  });
  double lo = 100;
  for (const auto& r : rs)
    for (const auto& p : r.policies) lo = std::min(lo, 100 * p.utilization);
  lo = std::max(0.0, std::floor(lo / 10) * 10);
  plcol0(kInk);
  plenv(0, static_cast<double>(rs.size() - 1), lo, 100, 0, 0);
  char title[200];
  std::snprintf(title, sizeof title, "%u accelerators x %.0f days, %zu assumption sets",
                rs.front().scenario.accelerators, rs.front().scenario.days, rs.size());
  pllab(("sweep point, ordered by " + rs.front().policies[ref].policy + "'s utilisation").c_str(),
        "effective accelerator utilisation %", title);
  const PLFLT xs[2] = {0, static_cast<double>(rs.size() - 1)};
  for (double level : {94.45, 90.0}) {
    const PLFLT ys[2] = {level, level};
    plcol0(kGrid);
    plline(2, xs, ys);
    plcol0(kInk);
    plptex(0.5, level + 0.4, 1, 0, 0, level > 94 ? "SIGMA's 94.45%" : "90%");
  }
  std::vector<const char*> names;
  std::vector<PLINT> opt, colors, styles;
  std::vector<PLFLT> widths;
  for (size_t p = 0; p < np; ++p) {
    std::vector<PLFLT> x, y;
    for (size_t i = 0; i < order.size(); ++i) {
      x.push_back(static_cast<double>(i));
      y.push_back(100 * rs[order[i]].policies[p].utilization);
    }
    const PLINT colour = static_cast<PLINT>(1 + (p * 3) % kBuckets.size());
    plcol0(colour);
    plwidth(2);
    plline(static_cast<PLINT>(x.size()), x.data(), y.data());
    names.push_back(rs.front().policies[p].policy.c_str());
    opt.push_back(PL_LEGEND_LINE);
    colors.push_back(colour);
    styles.push_back(1);
    widths.push_back(2);
  }
  plwidth(1);
  PLFLT w = 0, h = 0;
  const std::vector<PLINT> ink(np, kInk);
  pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
           PL_POSITION_INSIDE | PL_POSITION_BOTTOM | PL_POSITION_RIGHT, 0.02, 0.02, 0.1, 0, kInk, 1, 0, 0,
           static_cast<PLINT>(np), opt.data(), 1.0, 1.0, 2.0, 0.0, ink.data(), names.data(), nullptr, nullptr,
           nullptr, nullptr, colors.data(), styles.data(), widths.data(), nullptr, nullptr, nullptr, nullptr);
}

}  // namespace

void write_chart(const std::vector<sigma::sim::Result>& results, const std::string& path) {
  if (results.empty() || results.front().policies.empty()) return;
  plsdev("svg");
  plsfnam(path.c_str());
  palette();
  plspage(0, 0, 960, 600, 0, 0);
  plinit();
  if (results.size() == 1) {
    ledger_bars(results.front());
  } else {
    sweep_lines(results);
  }
  plend();
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 || ec)
    throw sigma::Error(sigma::Code::unavailable, "cannot write the chart " + path);
}

}  // namespace sigma_sim
