// After a group operation failed: which members said so and which did not.
// Each member that sees the failure writes what it saw to the store; a
// member that never writes within the window is dead or stuck in the
// operation, and is named as the likely cause.
#include <sigma/parallel.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

// Members that reported from an earlier operation than the others: the
// others got past it and wait in a later one for them (a rank hung inside a
// collective its peers finished). "" when every member that said was at
// the same operation.
std::string behind(const std::vector<std::pair<uint64_t, uint32_t>>& places,
                   const std::vector<uint32_t>& members) {
  const auto [low, high] = std::minmax_element(places.begin(), places.end());
  if (low->first == high->first) return {};
  std::string names;
  for (const auto& [op, m] : places)
    if (op == low->first) names += (names.empty() ? "" : ", ") + who(m, members[m]);
  return "; behind the others (in the group's operation " + std::to_string(low->first) +
         " while the others reached operation " + std::to_string(high->first) +
         " and waited there): " + names;
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
    // "<operation> <code>: <message>": where this member is in the group's
    // sequence of collectives, then what it saw.
    const uint64_t at = comm(kind).operations_started();
    const std::string mine = std::to_string(at) + " " + std::string(code_name(failure.code())) + ": " +
                             shorten(failure.what(), 300);
    store_->set(base + std::to_string(me), std::vector<uint8_t>(mine.begin(), mine.end()));
    const auto deadline = clock::now() + window;
    std::vector<std::string> silent, said;
    std::vector<std::pair<uint64_t, uint32_t>> places{{at, me}};  // (operation, member) of those that said
    for (uint32_t m = 0; m < members.size(); ++m) {
      if (m == me) continue;
      const auto left = std::max(clock::duration::zero(), deadline - clock::now());
      const auto v = store_->get(base + std::to_string(m), left);
      if (!v) {
        silent.push_back(who(m, members[m]));
        continue;
      }
      // A report without its operation number (not ours to trust) is quoted
      // whole and leaves the comparison of places alone.
      const std::string text(v->begin(), v->end());
      char* end = nullptr;
      const uint64_t op = std::strtoull(text.c_str(), &end, 10);
      const bool numbered = end != text.c_str() && *end == ' ';
      if (numbered) places.emplace_back(op, m);
      said.push_back(who(m, members[m]) + ": " + (numbered ? std::string(end + 1) : text));
    }
    std::string msg = std::string(failure.what()) + " [" + group_kind_name(kind) + " group " +
                      std::to_string(group_index(layout_, rank_, kind)) + ", this is " + who(me, rank_) + "]";
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(window).count());
    if (!silent.empty()) {
      msg += "; did not report the failure within " + std::string(secs) + " s (dead, or stuck in it): ";
      for (size_t i = 0; i < silent.size(); ++i) msg += (i ? ", " : "") + silent[i];
    }
    msg += behind(places, members);
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
