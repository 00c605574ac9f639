#include "compression_choice.hpp"

#include <algorithm>
#include <cstdio>

namespace sigma::checkpoint::choice {
namespace {

// bytes/s from seconds per byte, as "1400 MB/s" ("unknown" for no rate).
std::string rate(double s_per_byte) {
  if (s_per_byte <= 0) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MB/s", 1e-6 / s_per_byte);
  return buf;
}

}  // namespace

Costs costs(const Sample& s, const DiskRates& d, unsigned threads) {
  const double t = std::max(1u, threads);
  auto per_byte = [](double bytes_per_s) { return bytes_per_s > 0 ? 1 / bytes_per_s : 0.0; };
  Costs c;
  c.raw_save = per_byte(d.write);
  c.raw_restore = per_byte(d.read);
  c.zstd_save = std::max(s.ratio * per_byte(d.write), per_byte(s.encode * t));
  c.zstd_restore = std::max((s.ratio + s.base) * per_byte(d.read), per_byte(s.decode * t));
  return c;
}

bool compress(Compression mode, const Costs& c) {
  switch (mode) {
    case Compression::always:
      return true;
    case Compression::never:
      return false;
    case Compression::automatic:
      break;
  }
  return c.zstd_save <= c.raw_save && c.zstd_restore <= c.raw_restore;
}

std::string explain(bool compressed, const Costs& c) {
  return std::string(compressed ? "zstd" : "raw") + ": zstd saves at " + rate(c.zstd_save) +
         " and restores at " + rate(c.zstd_restore) + ", raw at " + rate(c.raw_save) + " and " +
         rate(c.raw_restore);
}

}  // namespace sigma::checkpoint::choice
