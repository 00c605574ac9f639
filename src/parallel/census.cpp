// After a group operation failed: which members said so and which did not.
// Each member that sees the failure writes what it saw to the store; a
// member that never writes within the window is dead or stuck in the
// operation, and is named as the likely cause.
#include <sigma/parallel.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace sigma::parallel {

namespace {

std::string shorten(std::string s, size_t most) {
  if (s.size() > most) s = s.substr(0, most) + "...";
  return s;
}

std::string who(uint32_t group_rank, uint32_t world_rank) {
  return "rank " + std::to_string(group_rank) + " (world rank " + std::to_string(world_rank) + ")";
}

}  // namespace

Error Groups::name_failure(GroupKind kind, const Error& failure, std::chrono::nanoseconds window) const {
  using clock = std::chrono::steady_clock;
  try {
    // The members still blocked in the operation fail at once and report.
    comm(kind).abort();
    const std::vector<uint32_t> members = group_members(layout_, rank_, kind);
    const uint32_t me = rank_in(kind);
    const std::string base = prefix_ + "census/" + group_kind_name(kind) + "/" +
                             std::to_string(group_index(layout_, rank_, kind)) + "/";
    const std::string mine = std::string(code_name(failure.code())) + ": " + shorten(failure.what(), 300);
    store_->set(base + std::to_string(me), std::vector<uint8_t>(mine.begin(), mine.end()));
    const auto deadline = clock::now() + window;
    std::vector<std::string> silent, said;
    for (uint32_t m = 0; m < members.size(); ++m) {
      if (m == me) continue;
      const auto left = std::max(clock::duration::zero(), deadline - clock::now());
      const auto v = store_->get(base + std::to_string(m), left);
      if (!v)
        silent.push_back(who(m, members[m]));
      else
        said.push_back(who(m, members[m]) + ": " + std::string(v->begin(), v->end()));
    }
    std::string msg = std::string(failure.what()) + " [" + group_kind_name(kind) + " group " +
                      std::to_string(group_index(layout_, rank_, kind)) + ", this is " + who(me, rank_) + "]";
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(window).count());
    if (!silent.empty()) {
      msg += "; did not report the failure within " + std::string(secs) + " s (dead, or stuck in it): ";
      for (size_t i = 0; i < silent.size(); ++i) msg += (i ? ", " : "") + silent[i];
    }
    for (const auto& s : said) msg += "; " + s;
    return Error(failure.code(), msg);
  } catch (const std::exception& e) {
    return Error(failure.code(),
                 std::string(failure.what()) + " (the failure census failed: " + e.what() + ")");
  }
}

std::function<Error(const Error&)> Groups::failure_namer(GroupKind kind,
                                                         std::chrono::nanoseconds window) const {
  return [this, kind, window](const Error& e) { return name_failure(kind, e, window); };
}

}  // namespace sigma::parallel
