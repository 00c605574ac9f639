// Checkpoints built to hurt the host, for real on disk: a manifest that
// promises gigabytes over kilobytes of chunks, tensors aliasing one stored
// range, a FIFO where the data file should be, a flipped size in a step's
// global manifest, and paths of the wrong kind. Each is refused by name,
// with bounded memory, and no command hangs.
#include "checkpoint/format.hpp"

#include <sigma/checkpoint.hpp>

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace sigma::checkpoint {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out;
  long max_rss_kib = 0;
};

// The address-space bound every hostile run gets: an allocation the size
// a hostile manifest claims (2 GiB) fails instead of succeeding. Not under
// a sanitizer, whose shadow memory reserves terabytes of address space:
// there the peak resident memory below is the bound.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr rlim_t kAddressSpace = RLIM_INFINITY;
#else
constexpr rlim_t kAddressSpace = rlim_t{1536} << 20;
#endif

// sigma-ckpt ARGS, its output, exit status and peak resident memory.
CliRun ckpt(const std::vector<std::string>& args) {
  CliRun r;
  const std::string out = ::testing::TempDir() + "hostile-out-" + std::to_string(::getpid());
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(out.c_str(), "a", stderr)) ::_exit(126);
    ::alarm(60);  // a hang becomes a failure, not a stuck test
    const rlimit as{kAddressSpace, kAddressSpace};
    if (::setrlimit(RLIMIT_AS, &as) != 0) ::_exit(125);
    std::vector<char*> argv{const_cast<char*>(SIGMA_CKPT)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(SIGMA_CKPT, argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.max_rss_kib = ru.ru_maxrss;
  std::ifstream in(out);
  r.out.assign(std::istreambuf_iterator<char>(in), {});
  fs::remove(out);
  return r;
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = ::testing::TempDir() + "hostile-" + std::to_string(::getpid());
    fs::remove_all(dir);
    Options o;
    o.dir = dir;
    o.chunk_bytes = uint64_t{16} << 20;
    o.compression = Compression::always;  // zeros in a few KiB: what the crafted manifests multiply
    Engine e(o);
    zeros.assign(uint64_t{4} << 20, 0.0f);  // 16 MiB: one chunk, a few KiB stored
    shard = e.save({TensorView("w", HAL_DTYPE_F32, {int64_t{4} << 20}, zeros.data())}, Metadata{}).path;
    manifest = format::decode(slurp(shard + "/" + format::kManifest), shard);
  }
  void TearDown() override { fs::remove_all(dir); }

  // Rewrites the shard's manifest (and data file) as given.
  void write(const format::Manifest& m, const std::vector<uint8_t>& data) {
    spit(shard + "/" + format::kData, data);
    spit(shard + "/" + format::kManifest, format::encode(m));
  }

  std::string dir, shard;
  std::vector<float> zeros;
  format::Manifest manifest;
};

TEST_F(Hostile, AManifestPromisingGigabytesIsVerifiedInChunkSizedMemory) {
  // 128 copies of the one stored chunk, each at its own place: a valid
  // 2 GiB tensor of zeros in a few hundred KiB on disk (a whole-tensor
  // decode would hold 2 GiB; chunk by chunk holds a few 16 MiB buffers).
  const std::vector<uint8_t> one = slurp(shard + "/" + format::kData);
  const format::Chunk c = manifest.tensors.at(0).chunks.at(0);
  std::vector<uint8_t> data;
  format::Manifest m = manifest;
  format::Tensor& t = m.tensors.at(0);
  t.chunks.clear();
  for (uint64_t k = 0; k < 128; ++k) {
    format::Chunk x = c;
    x.offset = k * c.raw_size;
    x.data_offset = data.size();
    data.insert(data.end(), one.begin() + static_cast<long>(c.data_offset),
                one.begin() + static_cast<long>(c.data_offset + c.stored_size));
    t.chunks.push_back(x);
  }
  t.shape = {static_cast<int64_t>(128 * (c.raw_size / 4))};
  t.bytes = 128 * c.raw_size;
  m.data_bytes = data.size();
  write(m, data);
  const CliRun r = ckpt({"verify", shard});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_LT(r.max_rss_kib, 1024 * 1024) << "verify held " << r.max_rss_kib << " KiB for a 2 GiB tensor";
  // Into a file of the test's own (a device named as the destination is
  // refused: the write's rename would replace it).
  const std::string out = shard + "-export.safetensors";
  const CliRun e = ckpt({"export", shard, "--safetensors", out});
  EXPECT_EQ(e.code, 0) << e.out;
  EXPECT_LT(e.max_rss_kib, 1024 * 1024) << "export held " << e.max_rss_kib << " KiB";
  std::filesystem::remove(out);
  const CliRun dev = ckpt({"export", shard, "--safetensors", "/dev/null"});
  EXPECT_NE(dev.code, 0) << dev.out;
  EXPECT_NE(dev.out.find("/dev/null is not a regular file (a device)"), std::string::npos) << dev.out;
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  // Two such tensors side by side (a whole-tensor diff would hold 4 GiB).
  const CliRun d = ckpt({"diff", shard, shard});
  EXPECT_EQ(d.code, 0) << d.out;
  EXPECT_NE(d.out.find("0 tensor(s) differ"), std::string::npos) << d.out;
  EXPECT_LT(d.max_rss_kib, 1024 * 1024) << "diff held " << d.max_rss_kib << " KiB";
}

TEST_F(Hostile, TensorsAliasingOneStoredRangeAreRefused) {
  format::Manifest m = manifest;
  for (int k = 0; k < 1000; ++k) {
    format::Tensor t = manifest.tensors.at(0);
    t.name = "alias." + std::to_string(k);
    m.tensors.push_back(t);
  }
  write(m, slurp(shard + "/" + format::kData));
  const CliRun r = ckpt({"verify", shard});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("overlap another chunk's"), std::string::npos) << r.out;
}

TEST_F(Hostile, AFifoInPlaceOfTheDataFileIsRefusedNotWaitedOn) {
  fs::remove(shard + "/" + format::kData);
  ASSERT_EQ(::mkfifo((shard + "/" + format::kData).c_str(), 0600), 0);
  for (const char* cmd : {"verify", "inspect"}) {
    const CliRun r = ckpt({cmd, shard});
    EXPECT_NE(r.code, 0) << cmd << ": " << r.out;
    EXPECT_LT(r.code, 128) << cmd << " was killed (a hang?): " << r.out;
  }
  const CliRun r = ckpt({"verify", shard});
  EXPECT_NE(r.out.find("not a regular file (a FIFO)"), std::string::npos) << r.out;
}

TEST_F(Hostile, AFlippedShardSizeInTheStepsGlobalManifestIsDamage) {
  const std::string global = fs::path(shard).parent_path().string() + "/global.sgcs";
  format::StepManifest g = format::decode_step(slurp(global), global);
  g.shards.at(0).data_bytes ^= 0x100;
  spit(global, format::encode_step(g));
  const CliRun r = ckpt({"verify", dir});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("recorded with"), std::string::npos) << r.out;
}

TEST_F(Hostile, PathsOfTheWrongKindAreUsageErrors) {
  const std::string file = dir + "/a-file";
  std::ofstream(file) << "x";
  for (const char* cmd : {"ls", "verify", "inspect"}) {
    const CliRun r = ckpt({cmd, file});
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
  }
  EXPECT_EQ(ckpt({"verify", dir + "/missing"}).code, 2);
}

}  // namespace
}  // namespace sigma::checkpoint
