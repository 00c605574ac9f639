// Shared by the checkpoint benchmarks: ~768 MiB of training state, the fp32
// weights of a transformer's shapes plus AdamW's two moments, their values
// produced by real AdamW steps (synthetic gradients, the optimiser's own
// arithmetic), not random bits.
#pragma once

#include <sigma/checkpoint.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sigma::bench {

// A transformer's parameter shapes (d_model 1024, 5 blocks + embeddings):
// 64 M fp32 parameters, 256 MiB; with AdamW's m and v, 768 MiB.
struct Model {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> w, m, v;
  uint64_t t = 0;

  Model() {
    auto add = [&](const std::string& n, std::vector<int64_t> s) {
      names.push_back(n);
      shapes.push_back(s);
    };
    add("embed", {2048, 1024});
    for (int l = 0; l < 5; ++l) {
      const std::string p = "blocks." + std::to_string(l) + ".";
      add(p + "attn.qkv", {3072, 1024});
      add(p + "attn.proj", {1024, 1024});
      add(p + "mlp.fc1", {4096, 1024});
      add(p + "mlp.fc2", {1024, 4096});
      add(p + "ln1", {1024});
      add(p + "ln2", {1024});
    }
    std::mt19937 rng(1);
    std::normal_distribution<float> init(0.0f, 0.02f);
    for (const auto& s : shapes) {
      size_t n = 1;
      for (int64_t d : s) n *= static_cast<size_t>(d);
      w.emplace_back(n);
      for (auto& x : w.back()) x = init(rng);
      m.emplace_back(n, 0.0f);
      v.emplace_back(n, 0.0f);
    }
  }

  // One AdamW step (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01)
  // with a synthetic gradient: noise plus a pull towards a fixed target.
  void adamw_step() {
    ++t;
    const float b1 = 0.9f, b2 = 0.999f, lr = 1e-4f, eps = 1e-8f, wd = 0.01f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(t)),
                c2 = 1.0f - std::pow(b2, static_cast<float>(t));
    std::mt19937 rng(static_cast<uint32_t>(1000 + t));
    std::normal_distribution<float> noise(0.0f, 1e-3f);
    for (size_t k = 0; k < w.size(); ++k) {
      for (size_t i = 0; i < w[k].size(); ++i) {
        const float g = 0.01f * w[k][i] + noise(rng);
        m[k][i] = b1 * m[k][i] + (1 - b1) * g;
        v[k][i] = b2 * v[k][i] + (1 - b2) * g * g;
        w[k][i] -= lr * ((m[k][i] / c1) / (std::sqrt(v[k][i] / c2) + eps) + wd * w[k][i]);
      }
    }
  }

  std::vector<checkpoint::TensorView> views() {
    std::vector<checkpoint::TensorView> out;
    for (size_t k = 0; k < w.size(); ++k) {
      out.push_back({names[k], HAL_DTYPE_F32, shapes[k], w[k].data()});
      out.push_back({names[k] + ".exp_avg", HAL_DTYPE_F32, shapes[k], m[k].data()});
      out.push_back({names[k] + ".exp_avg_sq", HAL_DTYPE_F32, shapes[k], v[k].data()});
    }
    return out;
  }

  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& x : w) b += x.size() * 4 * 3;
    return b;
  }
};

// The state's raw bytes written to `path` and fsync'ed: the plain path, the
// disk limit. False when a write failed.
inline bool write_raw(const Model& md, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = fd >= 0;
  for (const auto* set : {&md.w, &md.m, &md.v})
    for (const auto& x : *set)
      ok = ok && ::write(fd, x.data(), x.size() * 4) == static_cast<ssize_t>(x.size() * 4);
  ok = ok && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// The same bytes written the way the checkpoint engine writes its data
// files: O_DIRECT from an aligned 8 MiB buffer, then fsync (buffered where
// the file system refuses O_DIRECT). The disk limit in the engine's own I/O
// mode. False when a write failed.
inline bool write_raw_direct(const Model& md, const std::string& path) {
  constexpr size_t kBuf = size_t{8} << 20, kAlign = 4096;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) return write_raw(md, path);
  auto* buf = static_cast<char*>(std::aligned_alloc(kAlign, kBuf));
  bool ok = buf != nullptr;
  size_t fill = 0, total = 0;
  auto flush = [&](size_t n) { ok = ok && ::write(fd, buf, n) == static_cast<ssize_t>(n); };
  for (const auto* set : {&md.w, &md.m, &md.v})
    for (const auto& x : *set) {
      const char* p = reinterpret_cast<const char*>(x.data());
      for (size_t left = x.size() * 4; ok && left > 0;) {
        const size_t n = std::min(left, kBuf - fill);
        std::memcpy(buf + fill, p, n);
        fill += n, p += n, left -= n, total += n;
        if (fill == kBuf) flush(kBuf), fill = 0;
      }
    }
  if (ok && fill > 0) {  // the tail padded to the alignment, then cut back
    const size_t padded = (fill + kAlign - 1) / kAlign * kAlign;
    std::memset(buf + fill, 0, padded - fill);
    flush(padded);
    ok = ok && ::ftruncate(fd, static_cast<off_t>(total)) == 0;
  }
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  std::free(buf);
  return ok;
}

// Drops a file's pages from the page cache, so the next read comes from disk.
inline void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace sigma::bench
