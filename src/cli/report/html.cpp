// The terminal summary, report.html, and reading a job folder.
#include "charts.hpp"
#include "figures.hpp"
#include "regular_file.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sigma_report {

using json = nlohmann::json;

namespace {

std::string fmt(const char* f, double a) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

std::string pct(double x) { return x < 0 ? "n/a" : fmt("%.1f%%", 100 * x); }

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A job folder's file: regular files only (a FIFO named as a reference
// would block the report for ever).
std::string read_job_file(const std::string& path) {
  std::string text, why;
  if (!sigma::files::read_regular(path, uint64_t{1} << 30, text, why))
    throw std::runtime_error("report: cannot read " + path + ": " + why);
  return text;
}

json read_json(const std::string& path) {
  const std::string text = read_job_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error("report: " + path + " is not JSON: " + e.what());
  }
}

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_job_file(path));
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception& e) {
      throw std::runtime_error("report: " + path + ":" + std::to_string(n) + ": not JSON: " + e.what());
    }
  }
  return out;
}

}  // namespace

std::string summary(const Figures& f) {
  std::ostringstream o;
  o << "job " << f.status << ": " << f.steps << " steps in " << fmt("%.1f s", f.wall_s) << " on " << f.world
    << " devices (+" << f.spares << " spare)\n";
  o << "  tokens/s " << (f.tokens_per_s < 0 ? "n/a" : fmt("%.0f", f.tokens_per_s)) << " | MFU " << pct(f.mfu)
    << " of the measured GEMM peak | fleet MFU " << pct(f.fleet_mfu)
    << " (kept model FLOPs / wall x peak of every device held)"
    << " | goodput " << pct(f.goodput) << "\n";
  o << "  time lost:";
  for (const auto& [cause, s] : f.lost_s) o << " " << cause << fmt(" %.2f s", s) << ";";
  o << "\n";
  if (f.unread_journal_lines > 0)
    o << "  " << f.unread_journal_lines << " journal line(s) could not be read and are left out\n";
  for (const auto& i : f.incidents) {
    o << fmt("  %7.1f s  ", i.t) << i.kind << (i.device.empty() ? "" : " (" + i.device + ")") << ": "
      << i.what << "\n             -> " << i.handled << "\n";
  }
  return o.str();
}

std::string html(const Figures& f) {
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("sigma-report-" + std::to_string(::getpid()) + ".svg"))
          .string();
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>libsigma job report</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;max-width:960px;color:#222}"
       ".cards{display:flex;flex-wrap:wrap;gap:12px}.card{border:1px solid "
       "#ddd;border-radius:6px;padding:8px 14px}"
       ".card b{display:block;font-size:1.5em}table{border-collapse:collapse;width:100%;font-size:.9em}"
       "td,th{border-bottom:1px solid #eee;padding:4px;text-align:left;vertical-align:top}"
       "figure{margin:18px 0}svg{width:100%;height:auto}</style></head><body>\n";
  o << "<h1>Job report</h1><p>" << escape(f.status) << (f.reason.empty() ? "" : ": " + escape(f.reason))
    << " &mdash; " << f.steps << " steps in " << fmt("%.1f", f.wall_s) << " s on " << f.world
    << " devices and " << f.spares << " spare(s).</p>\n<div class=\"cards\">";
  auto card = [&](const std::string& name, const std::string& value) {
    o << "<div class=\"card\">" << escape(name) << "<b>" << escape(value) << "</b></div>";
  };
  card("tokens/s", f.tokens_per_s < 0 ? "n/a" : fmt("%.0f", f.tokens_per_s));
  card("MFU (measured GEMM peak)", pct(f.mfu));
  card("fleet MFU", pct(f.fleet_mfu));
  card("goodput", pct(f.goodput));
  card("incidents", std::to_string(f.incidents.size()));
  card("steps skipped / rolled back",
       std::to_string(f.skipped_steps) + " / " + std::to_string(f.rolled_back_steps));
  o << "</div>\n";
  const std::pair<const char*, std::string> charts[] = {
      {"loss", loss_chart(f, scratch)},
      {"step-time", step_time_chart(f, scratch)},
      {"temperature", temperature_chart(f, scratch)},
      {"timeline", timeline_chart(f, scratch)},
      {"goodput", goodput_chart(f, scratch)},
      {"precision", precision_chart(f, scratch)},
  };
  for (const auto& [id, svg] : charts)
    o << "<figure class=\"chart\" id=\"" << id << "\">" << svg << "</figure>\n";
  o << "<h2>Incidents</h2><table><tr><th>t "
       "(s)</th><th>what</th><th>device</th><th>detail</th><th>handled</th>"
       "<th>lost (s)</th></tr>\n";
  for (const auto& i : f.incidents) {
    o << "<tr><td>" << fmt("%.1f", i.t) << "</td><td>" << escape(i.kind) << "</td><td>" << escape(i.device)
      << "</td><td>" << escape(i.what) << "</td><td>" << escape(i.handled) << "</td><td>"
      << fmt("%.2f", i.lost_s) << "</td></tr>\n";
  }
  o << "</table>\n<h2>Time lost by cause</h2><table>";
  for (const auto& [cause, s] : f.lost_s)
    o << "<tr><td>" << escape(cause) << "</td><td>" << fmt("%.2f s", s) << "</td></tr>";
  o << "</table>\n<p>MFU: model FLOPs per second while stepping over the peak the workers measured with a "
       "GEMM. "
       "Fleet MFU: model FLOPs of the steps kept over the wall time and the peak of every device "
       "held, spares included (not the cluster simulator's effective accelerator utilisation, which is "
       "productive accelerator time over all of it).</p>\n</body></html>\n";
  return o.str();
}

std::pair<std::string, std::string> parse_compare(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw std::invalid_argument("'" + text + "': expected LABEL=JOB_DIR");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

std::string write_report(const std::string& job_dir, const std::string& reference_dir,
                         const std::vector<std::pair<std::string, std::string>>& compare) {
  json report = read_json(job_dir + "/report.json");
  const std::vector<json> journal = read_lines(job_dir + "/incidents.jsonl");
  json reference;
  if (!reference_dir.empty()) reference = read_json(reference_dir + "/report.json");
  std::vector<std::pair<std::string, json>> others;
  for (const auto& [label, dir] : compare) others.emplace_back(label, read_json(dir + "/report.json"));
  const Figures f = compute(report, journal, reference_dir.empty() ? nullptr : &reference, others);
  report["summary"] = to_json(f);
  const auto write = [](const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    std::ofstream out(tmp);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("report: cannot write " + path);
    std::filesystem::rename(tmp, path);
  };
  write(job_dir + "/report.json", report.dump(1) + "\n");
  write(job_dir + "/report.html", html(f));
  return summary(f);
}

}  // namespace sigma_report
