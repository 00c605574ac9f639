// The checkpoint folder layout as callers meet it: what a path is, the jobs
// below a folder, the shards of a step. Names only: nothing here opens a
// manifest, so it works on damaged checkpoints too (the tools that inspect
// them need that).
#include <sigma/checkpoint.hpp>

#include "format.hpp"
#include "io.hpp"

#include <algorithm>

namespace sigma::checkpoint {
namespace {

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool holds_steps(const std::string& dir) {
  uint64_t step = 0;
  for (const auto& name : io::list_dir(dir))
    if (format::parse_step(name, step)) return true;
  return false;
}

}  // namespace

PathKind classify(const std::string& path) {
  uint64_t step = 0;
  uint32_t rank = 0;
  const std::string name = base_name(path);
  if (io::exists(path + "/" + format::kManifest) || io::exists(path + "/" + format::kData) ||
      format::parse_rank(name, rank))
    return PathKind::shard;
  if (format::parse_step(name, step)) return PathKind::step;
  if (holds_steps(path)) return PathKind::job;
  return PathKind::other;
}

std::vector<std::string> list_jobs(const std::string& dir) {
  if (holds_steps(dir)) return {dir};
  std::vector<std::string> out;
  for (const auto& name : io::list_dir(dir))
    if (holds_steps(dir + "/" + name)) out.push_back(dir + "/" + name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> list_step_shards(const std::string& step_path) {
  std::vector<std::pair<uint32_t, std::string>> ranks;
  for (const auto& name : io::list_dir(step_path)) {
    uint32_t r = 0;
    if (format::parse_rank(name, r)) ranks.emplace_back(r, step_path + "/" + name);
  }
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::string> out;
  for (auto& [r, p] : ranks) out.push_back(std::move(p));
  return out;
}

}  // namespace sigma::checkpoint
