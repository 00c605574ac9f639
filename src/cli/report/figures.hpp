// The figures of a job's report, computed from what sigmarun wrote: its
// report.json (with the step and device series) and its journal. Pure: JSON
// in, figures out. Rendered by summary.cpp (the terminal) and html.cpp
// (report.html); to_json() is what report.json carries under "summary".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma_report {

struct Incident {
  double t = 0;         // seconds since the job started
  std::string kind;     // crash, device lost, migration, skipped step, rollback, silent corruption, ...
  std::string device;   // "device 3", or "" when none is to blame
  std::string what;     // what happened
  std::string handled;  // how the job dealt with it
  double lost_s = 0;    // wall time it cost, where known
};

struct Trace {
  std::vector<double> x, y;
};

struct DeviceTrace {
  uint32_t device = 0;
  Trace temperature;                                   // (t, degrees C)
  std::vector<std::pair<double, std::string>> health;  // (t, new state) at each change
};

// Steps [from, to) a layer ran in f32, escalated from its low precision.
struct Span {
  std::string layer;
  double from = 0, to = 0;
};

struct Figures {
  std::string status, reason;
  uint64_t steps = 0;
  double wall_s = 0;
  uint32_t world = 0, spares = 0;
  double median_step_s = 0;
  double tokens_per_s = -1;  // tokens of the steps kept / wall time; -1: not reported
  double mfu = -1;           // model FLOP/s while stepping / peak; -1: not reported
  // Fleet MFU: the kept steps' model FLOPs over wall x the peak of every
  // device held, spares included (not the simulator's effective accelerator
  // utilisation, which is productive accelerator time over all of it).
  double fleet_mfu = -1;
  double goodput = 1;
  uint64_t skipped_steps = 0, rolled_back_steps = 0;
  std::vector<std::pair<std::string, double>> lost_s;  // cause -> seconds, the ledger plus numerics
  std::vector<Incident> incidents;
  Trace loss, reference_loss, step_time;                    // loss by step; step time by wall time
  std::vector<std::pair<std::string, Trace>> compare_loss;  // other runs' loss by step, by label
  std::vector<Span> f32_spans;                              // escalated layers, in the order they ended
  std::vector<DeviceTrace> devices;
  uint64_t unread_journal_lines = 0;  // lines the journal's records could not be read from
};

// `journal`: the journal's lines in order. `reference`: a fault-free run's
// report.json, or null. `compare`: other runs' report.json, by the label
// their loss is drawn with.
Figures compute(const nlohmann::json& report, const std::vector<nlohmann::json>& journal,
                const nlohmann::json* reference,
                const std::vector<std::pair<std::string, nlohmann::json>>& compare = {});
nlohmann::json to_json(const Figures& f);

// The terminal summary: a few lines of figures, then one line per incident.
std::string summary(const Figures& f);
// report.html: one self-contained page (inline SVG, no script, no network).
std::string html(const Figures& f);

// Reads JOB_DIR/report.json and JOB_DIR/incidents.jsonl (and a reference
// job's report.json when given, and each compared job's by its label),
// writes the summary into report.json and report.html beside it, and
// returns the summary. Throws std::runtime_error naming the file that is
// missing or malformed.
std::string write_report(const std::string& job_dir, const std::string& reference_dir = {},
                         const std::vector<std::pair<std::string, std::string>>& compare = {});

// "LABEL=DIR" (--report-compare) as (label, dir); throws
// std::invalid_argument naming the text when either part is empty.
std::pair<std::string, std::string> parse_compare(const std::string& text);

}  // namespace sigma_report
