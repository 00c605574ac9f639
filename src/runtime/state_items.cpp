// The non-tensor state's region: fixed places, lengths checked both ways.
#include "runtime/state_items.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace sigma::runtime {

namespace {

constexpr uint64_t kLength = sizeof(uint32_t);

std::string encode_windows(const std::vector<std::pair<uint64_t, uint64_t>>& w) {
  std::string out(w.size() * 16, '\0');
  for (size_t i = 0; i < w.size(); ++i) {
    std::memcpy(out.data() + 16 * i, &w[i].first, 8);
    std::memcpy(out.data() + 16 * i + 8, &w[i].second, 8);
  }
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> decode_windows(std::string_view b) {
  if (b.size() % 16 != 0)
    throw Error(Code::data_loss, "runtime: the skipped batches take " + std::to_string(b.size()) +
                                     " bytes, not a whole number of windows");
  std::vector<std::pair<uint64_t, uint64_t>> w(b.size() / 16);
  for (size_t i = 0; i < w.size(); ++i) {
    std::memcpy(&w[i].first, b.data() + 16 * i, 8);
    std::memcpy(&w[i].second, b.data() + 16 * i + 8, 8);
    if (w[i].first >= w[i].second || (i > 0 && w[i].first <= w[i - 1].second))
      throw Error(Code::data_loss, "runtime: skipped batch window " + std::to_string(i) +
                                       " is empty or out of order in the restored state");
  }
  return w;
}

}  // namespace

StateItems::StateItems() {
  StateItem own;
  own.name = kSkipped;
  own.max_bytes = kMaxWindows * 16;
  own.save = [this] { return encode_windows(skipped_); };
  own.restore = [this](std::string_view b) { skipped_ = decode_windows(b); };
  own.kept_on_rollback = true;
  add(std::move(own));
}

void StateItems::add(StateItem item) {
  if (item.name.empty()) throw Error(Code::invalid_argument, "runtime: a state item needs a name");
  if (!item.save || !item.restore)
    throw Error(Code::invalid_argument, "runtime: state item '" + item.name + "' needs save and restore");
  if (item.max_bytes > UINT32_MAX)
    throw Error(Code::invalid_argument, "runtime: state item '" + item.name + "' may hold at most 4 GiB");
  for (const Slot& s : slots_)
    if (s.item.name == item.name)
      throw Error(Code::invalid_argument, "runtime: state item '" + item.name + "' is registered twice");
  const uint64_t at = region_.size();
  region_.resize(at + kLength + item.max_bytes, 0);
  slots_.push_back({std::move(item), at});
}

checkpoint::TensorView StateItems::view() {
  return {kTensor, HAL_DTYPE_U8, {static_cast<int64_t>(region_.size())}, region_.data()};
}

void StateItems::save() {
  for (const Slot& s : slots_) {
    const std::string bytes = s.item.save();
    if (bytes.size() > s.item.max_bytes)
      throw Error(Code::invalid_argument, "runtime: state item '" + s.item.name + "' saved " +
                                              std::to_string(bytes.size()) + " bytes, above its max_bytes " +
                                              std::to_string(s.item.max_bytes));
    const auto n = static_cast<uint32_t>(bytes.size());
    std::memcpy(region_.data() + s.offset, &n, kLength);
    std::memcpy(region_.data() + s.offset + kLength, bytes.data(), n);
  }
}

void StateItems::restore(bool rollback) {
  for (const Slot& s : slots_) {
    if (rollback && s.item.kept_on_rollback) continue;
    uint32_t n = 0;
    std::memcpy(&n, region_.data() + s.offset, kLength);
    if (n > s.item.max_bytes)
      throw Error(Code::data_loss, "runtime: state item '" + s.item.name + "' holds " + std::to_string(n) +
                                       " bytes in the restored state, above its max_bytes " +
                                       std::to_string(s.item.max_bytes));
    s.item.restore(std::string_view(reinterpret_cast<const char*>(region_.data() + s.offset + kLength), n));
  }
}

uint64_t StateItems::batch_of(uint64_t step) const {
  uint64_t b = step;
  for (auto [begin, end] : skipped_) {
    if (begin > b) break;
    b += end - begin;
  }
  return b;
}

void StateItems::skip(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  auto w = skipped_;
  w.emplace_back(begin, end);
  std::sort(w.begin(), w.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (auto r : w) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  if (merged.size() > kMaxWindows)
    throw Error(Code::invalid_argument,
                "runtime: more than " + std::to_string(kMaxWindows) + " skipped batch windows");
  skipped_ = std::move(merged);
}

}  // namespace sigma::runtime
