#include "supervise.hpp"

#include "report.hpp"

#include <sys/wait.h>

#include <cstring>

namespace sigma::conformance {

namespace {

constexpr double kExitGraceS = 10;  // after its end line a worker must be gone within this

std::string cut(const std::string& s, size_t n = 512) { return s.size() > n ? s.substr(0, n) + "..." : s; }

}  // namespace

std::string describe_wait_status(int st) {
  if (WIFSIGNALED(st)) return std::string("was killed by signal ") + ::strsignal(WTERMSIG(st));
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  return "ended (wait status " + std::to_string(st) + ")";
}

Supervision::Supervision(uint32_t world, double check_timeout_s, double total_timeout_s, double now_s)
    : world_(world),
      check_timeout_s_(check_timeout_s),
      deadline_s_(now_s + total_timeout_s),
      workers_(world),
      results_(world) {}

void Supervision::begin_attempt(uint32_t group, double now_s) {
  for (Worker& w : workers_) {
    w = Worker{};
    w.group = group;
    w.check_since = now_s;
  }
}

// The first result per check and rank counts: a restarted worker loads
// the plugin again, and its "load" is not news.
void Supervision::add(uint32_t rank, Result r) {
  for (const Result& have : results_[rank])
    if (have.name == r.name) return;
  results_[rank].push_back(std::move(r));
}

void Supervision::line(uint32_t rank, const std::string& text, double now_s) {
  if (rank >= world_) return;
  Worker& w = workers_[rank];
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  try {
    if (j.is_discarded() || !j.is_object()) throw std::runtime_error("not a JSON object");
    if (j.contains("group")) {
      w.group = j.at("group").get<uint32_t>();
    } else if (j.contains("begin")) {
      w.check = j.at("begin").get<std::string>();
      w.check_since = now_s;
    } else if (j.contains("result")) {
      add(rank, results_from_json(nlohmann::json::array({j.at("result")})).at(0));
      w.check.clear();
      w.check_since = now_s;
    } else if (j.contains("end")) {
      w.ended = true;
      w.ended_at = now_s;
    } else {
      throw std::runtime_error("no known key");
    }
  } catch (const std::exception& e) {
    if (w.broken.empty())
      w.broken = "sent a line the suite cannot read (" + std::string(e.what()) + "): " + cut(text);
  }
}

void Supervision::exited(uint32_t rank, int status, const std::string& last_words, double now_s) {
  if (rank >= world_) return;
  Worker& w = workers_[rank];
  w.exited = true;
  w.status = status;
  w.last_words = last_words;
  if (!w.ended) w.ended_at = now_s;
}

void Supervision::said(uint32_t rank, const std::string& last_words) {
  if (rank < world_) workers_[rank].last_words = last_words;
}

// Records the failure on the check the rank was in and says why the attempt ends.
Stop Supervision::stop(uint32_t rank, std::string detail) {
  const Worker& w = workers_[rank];
  Stop s;
  s.rank = rank;
  s.check = w.check;
  s.group = w.group;
  if (!w.last_words.empty()) detail += "; its last words: " + cut(w.last_words);
  s.detail = detail;
  s.final = w.check == "load";  // nothing runs without the plugin
  add(rank, {w.check.empty() ? "process.rank" + std::to_string(rank) : w.check, Outcome::fail,
             "the worker process " + detail, 0});
  return s;
}

std::optional<Stop> Supervision::check(double now_s) {
  auto rest = [&](Stop s) {  // a restarted worker resumes with the next group
    if (!s.final && s.group + 1 < kGroupCount) {
      const std::string why = "not run: the group ended when rank " + std::to_string(s.rank) + " failed " +
                              (s.check.empty() ? "between checks" : s.check);
      for (uint32_t r = 0; r < world_; ++r)
        add(r, {std::string(kGroups[s.group]) + ".(rest)", Outcome::skip, why, 0});
    }
    return s;
  };
  for (uint32_t r = 0; r < world_; ++r) {
    Worker& w = workers_[r];
    if (!w.broken.empty()) return rest(stop(r, w.broken));
    if (w.exited && !w.ended)
      return rest(stop(r, describe_wait_status(w.status) + " before its results were complete"));
    if (w.exited && w.status != 0) {
      Stop s = stop(r, describe_wait_status(w.status) + " after its results");
      s.final = true;
      return s;
    }
    if (w.ended && !w.exited && now_s - w.ended_at > kExitGraceS) {
      Stop s = stop(r, "did not exit within " + std::to_string(static_cast<int>(kExitGraceS)) +
                           " s after its results (a hang in unloading?): killed");
      s.final = true;
      return s;
    }
    if (!w.ended && !w.exited && now_s - w.check_since > check_timeout_s_) {
      return rest(stop(r, "was still in this check after " +
                              std::to_string(static_cast<int>(check_timeout_s_)) +
                              " s (--check-timeout-s): killed"));
    }
  }
  if (now_s > deadline_s_) {
    uint32_t r = 0;
    while (r + 1 < world_ && workers_[r].ended) ++r;
    Stop s = stop(r, "was still running when the suite's --timeout-s ran out: killed");
    s.final = true;
    return s;
  }
  return std::nullopt;
}

bool Supervision::caught_up(const Stop& s) const {
  for (uint32_t r = 0; r < world_; ++r) {
    if (r == s.rank) continue;
    const Worker& w = workers_[r];
    if (w.exited || w.ended || w.group > s.group) continue;
    if (!s.check.empty() && w.check == s.check) continue;
    bool done = false;
    for (const Result& res : results_[r]) done = done || (!s.check.empty() && res.name == s.check);
    if (!done) return false;
  }
  return true;
}

bool Supervision::finished() const {
  for (const Worker& w : workers_)
    if (!w.ended || !w.exited || w.status != 0) return false;
  return true;
}

}  // namespace sigma::conformance
