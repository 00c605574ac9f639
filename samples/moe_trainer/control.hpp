// The trainer's own small state, kept in the snapshots with the model: the
// guardrails' policy state, the data windows a rollback skipped, the
// autotuner's state and where this rank keeps its experts. All must survive
// a crash restore (they are in the snapshot); the first two must not go
// back in time on a rollback (the trainer writes the newest back after it).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace moe {

class Control {
 public:
  static constexpr size_t kBytes = 1 << 16;  // a fixed-size view for the session

  Control() : buf_(kBytes, 0) {}
  uint8_t* data() { return buf_.data(); }

  // The state as JSON: {"guardrails": ..., "skips": [[b, e], ...], "balancer": ..., "slots": [...]}.
  nlohmann::json read() const {
    if (buf_[0] == 0) return nlohmann::json::object();
    return nlohmann::json::parse(reinterpret_cast<const char*>(buf_.data()));
  }
  void write(const nlohmann::json& j) {
    const std::string text = j.dump();
    if (text.size() + 1 > kBytes) throw std::length_error("trainer control state over 64 KiB");
    std::memcpy(buf_.data(), text.c_str(), text.size() + 1);
  }
  std::vector<std::pair<uint64_t, uint64_t>> skips() const {
    return read().value("skips", std::vector<std::pair<uint64_t, uint64_t>>{});
  }
  std::string bytes() const { return std::string(buf_.begin(), buf_.end()); }
  void set_bytes(const std::string& b) { std::copy(b.begin(), b.end(), buf_.begin()); }

  // Batches [begin, end) are never trained on (a rollback's data window).
  void skip(uint64_t begin, uint64_t end) {
    auto s = skips();
    s.emplace_back(begin, end);
    std::sort(s.begin(), s.end());
    std::vector<std::pair<uint64_t, uint64_t>> merged;
    for (auto r : s) {
      if (!merged.empty() && r.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, r.second);
      else
        merged.push_back(r);
    }
    nlohmann::json j = read();
    j["skips"] = merged;
    write(j);
  }

  // The batch step `step` trains on: the step-th batch not skipped. Pure.
  static uint64_t batch_of(uint64_t step, const std::vector<std::pair<uint64_t, uint64_t>>& skips) {
    uint64_t b = step;
    for (auto [begin, end] : skips) {
      if (begin > b) break;
      b += end - begin;
    }
    return b;
  }

 private:
  std::vector<uint8_t> buf_;
};

}  // namespace moe
