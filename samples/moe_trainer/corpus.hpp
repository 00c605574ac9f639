// Byte-level batches from one text file: batch b of rank r is a pure
// function of (seed, b, r), so a step re-run after a restore reads the same
// bytes. A poisoned batch is random bytes instead: a data fault (a corrupt
// shard) for the guardrails to catch as a loss spike.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {

class Corpus {
 public:
  explicit Corpus(const std::string& path) {
    // A FIFO or a device would block the read, or never end it.
    if (!std::filesystem::is_regular_file(path))
      throw std::runtime_error("moe_trainer: the text " + path + " is not a regular file (or is missing)");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("moe_trainer: cannot read the text " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    text_ = ss.str();
    if (text_.size() < 4096) throw std::runtime_error("moe_trainer: " + path + " is too short to train on");
  }
  size_t size() const { return text_.size(); }

  // [rows, seq + 1] int64 bytes.
  torch::Tensor batch(uint64_t seed, uint64_t b, uint32_t rank, int64_t rows, int64_t seq,
                      bool poisoned) const {
    torch::Tensor out = torch::empty({rows, seq + 1}, torch::kInt64);
    int64_t* p = out.data_ptr<int64_t>();
    const uint64_t span = text_.size() - static_cast<uint64_t>(seq) - 1;
    for (int64_t i = 0; i < rows; ++i) {
      uint64_t h = mix(
          seed ^ mix(b * 0x9E3779B97F4A7C15ull + rank * 0x632BE59BD9B4E019ull + static_cast<uint64_t>(i)));
      const uint64_t at = h % span;
      for (int64_t j = 0; j <= seq; ++j) {
        if (poisoned) h = mix(h);
        p[i * (seq + 1) + j] = poisoned ? static_cast<int64_t>(h & 0xFF)
                                        : static_cast<uint8_t>(text_[at + static_cast<uint64_t>(j)]);
      }
    }
    return out;
  }

 private:
  static uint64_t mix(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  std::string text_;
};

}  // namespace moe
