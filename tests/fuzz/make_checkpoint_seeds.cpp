// Writes the valid seeds of fuzz_checkpoint from a checkpoint the engine
// saves now, in the harness's input format (see fuzz_checkpoint.cpp), so
// the committed seeds can be made again and a test can check that what the
// engine writes today is what the harness accepts:
//   base_shard     step 7's shard manifest + data file
//   step_manifest  step 7's global manifest + the shard manifest it records
//   delta_shard    step 8's differential shard (its base is not there: refused)
//   raw_base_shard step 7's shard with every chunk stored raw (format 2)
// (the others with every chunk compressed: the automatic choice depends on
// the machine)
//
//   make_checkpoint_seeds OUT_DIR
#include <sigma/checkpoint.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The harness's input: a little-endian 4-byte length, `head`, then `rest`.
void seed(const fs::path& out, const std::string& head, const std::string& rest) {
  std::ofstream f(out, std::ios::binary);
  const uint32_t n = static_cast<uint32_t>(head.size());
  const char len[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 24)};
  f.write(len, 4);
  f << head << rest;
  if (!f) throw std::runtime_error("cannot write " + out.string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_checkpoint_seeds OUT_DIR\n";
    return 2;
  }
  try {
    const fs::path out = argv[1], root = out / "checkpoint-root";
    fs::remove_all(root);
    fs::create_directories(out);
    sigma::checkpoint::Options o;
    o.dir = root.string();
    o.job = "job";         // the harness's folder: job/step-.../rank-00000
    o.chunk_bytes = 4096;  // the smallest chunk: two chunks for w
    o.compression = sigma::checkpoint::Compression::always;
    sigma::checkpoint::Engine e(o);
    std::vector<float> w(1536);
    std::vector<uint16_t> h(40);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.1f * static_cast<float>(i));
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(0x3f80 + i);
    const std::vector<sigma::checkpoint::TensorView> views = {{"w", HAL_DTYPE_F32, {32, 48}, w.data()},
                                                              {"h", HAL_DTYPE_BF16, {40}, h.data()}};
    sigma::checkpoint::Metadata meta;
    meta.step = 7;
    meta.data_position = 7;
    const std::string s7 = e.save(views, meta).path;
    w[3] += 1;
    meta.step = 8;
    const std::string s8 = e.save(views, meta).path;
    const std::string step7 = fs::path(s7).parent_path().string();
    seed(out / "base_shard", slurp(fs::path(s7) / "manifest.sgck"), slurp(fs::path(s7) / "data.bin"));
    seed(out / "step_manifest", slurp(fs::path(step7) / "global.sgcs"),
         slurp(fs::path(s7) / "manifest.sgck"));
    seed(out / "delta_shard", slurp(fs::path(s8) / "manifest.sgck"), slurp(fs::path(s8) / "data.bin"));
    o.dir = (root / "raw").string();
    o.compression = sigma::checkpoint::Compression::never;
    sigma::checkpoint::Engine raw(o);
    meta.step = 7;
    const std::string r7 = raw.save(views, meta).path;
    seed(out / "raw_base_shard", slurp(fs::path(r7) / "manifest.sgck"), slurp(fs::path(r7) / "data.bin"));
    fs::remove_all(root);
    return 0;
  } catch (const std::exception& ex) {
    std::cerr << "make_checkpoint_seeds: " << ex.what() << "\n";
    return 1;
  }
}
