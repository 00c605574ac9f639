// The report's charts, drawn by PLplot's SVG driver (Debian libplplot-dev)
// and returned as SVG text for inlining.
#include "charts.hpp"

#include <plplot/plplot.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

namespace sigma_report {
namespace {

// Colour map 0: paper, ink, grid, then the series colours.
constexpr int kInk = 1, kGrid = 2, kFirst = 3;
constexpr std::array<std::array<int, 3>, 8> kColours{{{31, 119, 180},
                                                      {214, 39, 40},
                                                      {44, 160, 44},
                                                      {255, 127, 14},
                                                      {148, 103, 189},
                                                      {140, 86, 75},
                                                      {127, 127, 127},
                                                      {23, 190, 207}}};

void palette() {
  plscol0(0, 255, 255, 255);
  plscol0(kInk, 30, 30, 30);
  plscol0(kGrid, 215, 215, 215);
  for (size_t i = 0; i < kColours.size(); ++i)
    plscol0(static_cast<PLINT>(kFirst + i), kColours[i][0], kColours[i][1], kColours[i][2]);
}
PLINT colour(size_t i) { return static_cast<PLINT>(kFirst + i % kColours.size()); }

// Draws into a fresh SVG file and returns its <svg> element.
std::string draw(const std::string& scratch, int width, int height, const std::function<void()>& body) {
  plsdev("svg");
  plsfnam(scratch.c_str());
  palette();
  plspage(0, 0, width, height, 0, 0);
  plinit();
  plfontld(1);
  pladv(0);
  body();
  plend();
  std::ifstream in(scratch);
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::remove(scratch);
  std::string s = ss.str();
  const auto at = s.find("<svg");
  if (at == std::string::npos) throw std::runtime_error("report: PLplot wrote no SVG to " + scratch);
  return s.substr(at);
}

struct Range {
  double lo = 0, hi = 1;
  void fit(const std::vector<double>& v) {
    for (double x : v) {
      if (!std::isfinite(x)) continue;
      if (empty) {
        lo = hi = x;
        empty = false;
      }
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  void pad() {
    if (hi <= lo) hi = lo + 1;
    const double m = 0.05 * (hi - lo);
    lo -= m;
    hi += m;
  }
  bool empty = true;
};

void frame(const Range& x, const Range& y, const char* xl, const char* yl, const char* title) {
  plvpor(0.08, 0.98, 0.3, 0.9);  // room below for the axis label and the legend
  plwind(x.lo, x.hi, y.lo, y.hi);
  plcol0(kGrid);
  plbox("g", 0, 0, "g", 0, 0);
  plcol0(kInk);
  plbox("bcnst", 0, 0, "bcnstv", 0, 0);
  pllab(xl, yl, title);
}

void line(const Trace& t, PLINT c, double width = 1.5) {
  if (t.x.size() < 2) return;
  plcol0(c);
  plwidth(width);
  plline(static_cast<PLINT>(t.x.size()), t.x.data(), t.y.data());
  plwidth(1);
}

void legend(const std::vector<std::string>& names, const std::vector<PLINT>& colours) {
  const size_t n = names.size();
  std::vector<const char*> text;
  for (const auto& s : names) text.push_back(s.c_str());
  std::vector<PLINT> opt(n, PL_LEGEND_LINE), styles(n, 1), ink(n, kInk);
  std::vector<PLFLT> widths(n, 2);
  PLFLT w = 0, h = 0;
  // Below the plot, in rows of three, never over the data.
  const auto columns = static_cast<PLINT>(std::min<size_t>(n, 3)), rows = static_cast<PLINT>((n + 2) / 3);
  pllegend(&w, &h, PL_LEGEND_BACKGROUND, PL_POSITION_OUTSIDE | PL_POSITION_BOTTOM, 0, 0.2, 0.05, 0, kInk, 1,
           rows, columns, static_cast<PLINT>(n), opt.data(), 1.0, 1.0, 2.0, 0.0, ink.data(), text.data(),
           nullptr, nullptr, nullptr, nullptr, colours.data(), styles.data(), widths.data(), nullptr, nullptr,
           nullptr, nullptr);
}

// Whether a series has something to draw: two finite points.
bool drawable(const Trace& t) {
  size_t n = 0;
  for (size_t i = 0; i < t.x.size() && i < t.y.size(); ++i)
    n += std::isfinite(t.x[i]) && std::isfinite(t.y[i]);
  return n >= 2;
}

// What a chart with nothing to draw shows instead of an empty frame.
std::string no_data(const std::string& title, const std::string& what) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"no-data\" width=\"900\" height=\"60\">"
         "<text x=\"16\" y=\"36\" font-family=\"sans-serif\" font-size=\"15\" fill=\"#555\">" +
         title + ": no data (" + what + ")</text></svg>";
}

// A chart of named rows over x: the frame, its grid and each row's name at
// its left. Row k lies at y = rows - 1 - k (row_y).
void rows_frame(const Range& x, const std::vector<std::string>& rows, PLFLT bottom, PLFLT top, const char* xl,
                const char* title) {
  const double n = static_cast<double>(std::max<size_t>(rows.size(), 1));
  plvpor(0.2, 0.97, bottom, top);
  plwind(x.lo, x.hi, -0.5, n - 0.5);
  plcol0(kGrid);
  plbox("g", 0, 0, "", 0, 0);
  plcol0(kInk);
  plbox("bcnst", 0, 0, "bc", 0, 0);
  pllab(xl, "", title);
  for (size_t k = 0; k < rows.size(); ++k) {
    plcol0(kInk);
    plmtex("lv", 1.0, (n - 1 - static_cast<double>(k) + 0.5) / n, 1.0, rows[k].c_str());
  }
}
double row_y(size_t k, size_t rows) { return static_cast<double>(rows) - 1 - static_cast<double>(k); }

}  // namespace

std::string loss_chart(const Figures& f, const std::string& scratch) {
  if (!drawable(f.loss)) return no_data("Training loss", "the job reported no loss");
  return draw(scratch, 900, 420, [&] {
    Range x, y;
    x.fit(f.loss.x);
    x.fit(f.reference_loss.x);
    y.fit(f.loss.y);
    y.fit(f.reference_loss.y);
    for (const auto& [label, t] : f.compare_loss) x.fit(t.x), y.fit(t.y);
    // Spikes the guardrails threw away would flatten the curve: clip the axis.
    if (!f.reference_loss.y.empty())
      y.hi = std::min(y.hi, 1.5 * *std::max_element(f.reference_loss.y.begin(), f.reference_loss.y.end()));
    y.pad();
    frame(x, y, "step", "loss", "Training loss: this run against the fault-free reference");
    line(f.reference_loss, colour(3), 5);  // a wide halo: where the runs agree, this run lies on it
    for (size_t i = 0; i < f.compare_loss.size(); ++i) line(f.compare_loss[i].second, colour(4 + i), 1.5);
    line(f.loss, colour(0), 1.5);
    std::vector<std::string> names{"this run"};
    std::vector<PLINT> cs{colour(0)};
    if (!f.reference_loss.x.empty()) {
      names.push_back("fault-free reference");
      cs.push_back(colour(3));
    }
    for (size_t i = 0; i < f.compare_loss.size(); ++i) {
      names.push_back(f.compare_loss[i].first);
      cs.push_back(colour(4 + i));
    }
    legend(names, cs);
  });
}

std::string step_time_chart(const Figures& f, const std::string& scratch) {
  if (!drawable(f.step_time)) return no_data("Step time", "the job finished no step");
  return draw(scratch, 900, 400, [&] {
    Range x, y;
    x.fit(f.step_time.x);
    y.fit(f.step_time.y);
    y.lo = 0;
    y.pad();
    frame(x, y, "seconds since the job started", "step time (s)", "Step time, incidents marked");
    std::map<std::string, PLINT> kinds;
    for (const auto& i : f.incidents) {
      const PLINT c = kinds.emplace(i.kind, colour(1 + kinds.size())).first->second;
      const PLFLT xs[2] = {i.t, i.t}, ys[2] = {y.lo, y.hi};
      plcol0(c);
      plline(2, xs, ys);
    }
    line(f.step_time, colour(0), 1);
    plcol0(colour(0));
    plpoin(static_cast<PLINT>(f.step_time.x.size()), f.step_time.x.data(), f.step_time.y.data(), 1);
    std::vector<std::string> names;
    std::vector<PLINT> cs;
    for (const auto& [k, c] : kinds) {
      names.push_back(k);
      cs.push_back(c);
    }
    if (!names.empty()) legend(names, cs);
  });
}

std::string temperature_chart(const Figures& f, const std::string& scratch) {
  if (std::none_of(f.devices.begin(), f.devices.end(), [](const auto& d) { return drawable(d.temperature); }))
    return no_data("Device temperature", "no device reported a temperature");
  return draw(scratch, 900, 420, [&] {
    Range x, y;
    for (const auto& d : f.devices) {
      x.fit(d.temperature.x);
      y.fit(d.temperature.y);
    }
    y.pad();
    y.hi += 0.05 * (y.hi - y.lo);  // marks on the hottest curve stay inside
    frame(x, y, "seconds since the job started", "temperature (C)",
          "Device temperature; health changes marked (orange: suspect, red: failing, black: failed)");
    std::vector<std::string> names;
    std::vector<PLINT> cs;
    for (size_t k = 0; k < f.devices.size(); ++k) {
      const auto& d = f.devices[k];
      line(d.temperature, colour(k));
      names.push_back("device " + std::to_string(d.device));
      cs.push_back(colour(k));
      for (const auto& [t, state] : d.health) {
        // The mark sits on the device's curve at that time.
        double temp = y.lo;
        for (size_t i = 0; i < d.temperature.x.size(); ++i)
          if (d.temperature.x[i] <= t) temp = d.temperature.y[i];
        PLFLT px = t, py = temp;
        const PLINT c = state == "suspect" ? colour(3) : state == "failing" ? colour(1) : kInk;
        if (state != "suspect" && state != "failing" && state != "failed") continue;
        plcol0(c);
        plssym(0, 2.0);
        plpoin(1, &px, &py, 17);
        plssym(0, 1.0);
      }
    }
    if (!names.empty()) legend(names, cs);
  });
}

std::string timeline_chart(const Figures& f, const std::string& scratch) {
  if (f.incidents.empty()) return no_data("Incident timeline", "no incident happened");
  std::vector<std::string> kinds;
  for (const auto& i : f.incidents)
    if (std::find(kinds.begin(), kinds.end(), i.kind) == kinds.end()) kinds.push_back(i.kind);
  const int height = 120 + 28 * static_cast<int>(std::max<size_t>(kinds.size(), 1));
  return draw(scratch, 900, height, [&] {
    Range x;
    x.lo = 0;
    x.hi = std::max(f.wall_s, 1.0);
    rows_frame(x, kinds, 0.2, 0.85, "seconds since the job started", "Incident timeline");
    for (size_t k = 0; k < kinds.size(); ++k) {
      const double yk = row_y(k, kinds.size());
      for (const auto& i : f.incidents) {
        if (i.kind != kinds[k]) continue;
        PLFLT px = i.t, py = yk;
        plcol0(colour(k));
        plssym(0, 2.2);
        plpoin(1, &px, &py, 17);
        plssym(0, 1.0);
        if (!i.device.empty()) plptex(px, py + 0.25, 1, 0, 0.5, i.device.c_str());
      }
    }
  });
}

std::string goodput_chart(const Figures& f, const std::string& scratch) {
  if (!(f.wall_s > 0)) return no_data("Where the time went", "the job ran for no measurable time");
  return draw(scratch, 900, 220, [&] {
    double lost = 0;
    for (const auto& [cause, s] : f.lost_s) lost += s;
    const double wall = std::max(f.wall_s, 1e-9), productive = std::max(0.0, wall - lost);
    plvpor(0.05, 0.97, 0.45, 0.8);
    plwind(0, 100, 0, 1);
    plcol0(kInk);
    plbox("bcnst", 0, 0, "bc", 0, 0);
    pllab("% of the job's wall time", "", "Where the time went");
    double at = 0;
    std::vector<std::pair<std::string, double>> parts{{"productive", productive}};
    for (const auto& p : f.lost_s)
      if (p.second > 0) parts.push_back(p);
    std::vector<std::string> names;
    std::vector<PLINT> cs;
    for (size_t k = 0; k < parts.size(); ++k) {
      const double w = 100 * parts[k].second / wall;
      PLFLT xs[4] = {at, at, at + w, at + w}, ys[4] = {0.15, 0.85, 0.85, 0.15};
      plcol0(k == 0 ? colour(2) : colour(k + 2));
      plfill(4, xs, ys);
      at += w;
      char label[128];
      std::snprintf(label, sizeof label, "%s %.2f s (%.1f%%)", parts[k].first.c_str(), parts[k].second, w);
      names.push_back(label);
      cs.push_back(k == 0 ? colour(2) : colour(k + 2));
    }
    std::vector<const char*> text;
    for (const auto& s : names) text.push_back(s.c_str());
    const size_t n = names.size();
    std::vector<PLINT> opt(n, PL_LEGEND_COLOR_BOX), styles(n, 0), ink(n, kInk);
    std::vector<PLFLT> scales(n, 0.8), widths(n, 1);
    PLFLT w = 0, h = 0;
    pllegend(&w, &h, PL_LEGEND_BACKGROUND, PL_POSITION_OUTSIDE | PL_POSITION_BOTTOM, 0, 0.12, 0.1, 0, kInk, 1,
             static_cast<PLINT>(std::min<size_t>(n, 4)), static_cast<PLINT>((n + 3) / 4),
             static_cast<PLINT>(n), opt.data(), 0.5, 0.7, 2.0, 0.0, ink.data(), text.data(), cs.data(),
             styles.data(), scales.data(), widths.data(), nullptr, nullptr, nullptr, nullptr, nullptr,
             nullptr, nullptr);
  });
}

std::string precision_chart(const Figures& f, const std::string& scratch) {
  if (f.f32_spans.empty()) return no_data("Precision per layer", "no layer left its low precision");
  std::vector<std::string> layers;
  for (const auto& sp : f.f32_spans)
    if (std::find(layers.begin(), layers.end(), sp.layer) == layers.end()) layers.push_back(sp.layer);
  const int height = 130 + 30 * static_cast<int>(layers.size());
  return draw(scratch, 900, height, [&] {
    Range x;
    x.fit(f.loss.x);
    for (const auto& sp : f.f32_spans) x.fit({sp.from, sp.to});
    x.lo = 0;
    x.pad();
    rows_frame(x, layers, 0.3, 0.78, "step",
               "Precision per layer: the steps each layer ran in f32 (escalated); f16 elsewhere");
    for (size_t k = 0; k < layers.size(); ++k) {
      const double yk = row_y(k, layers.size());
      for (const auto& sp : f.f32_spans) {
        if (sp.layer != layers[k]) continue;
        PLFLT xs[4] = {sp.from, sp.from, sp.to, sp.to}, ys[4] = {yk - 0.3, yk + 0.3, yk + 0.3, yk - 0.3};
        plcol0(colour(1));
        plfill(4, xs, ys);
      }
    }
  });
}

}  // namespace sigma_report
