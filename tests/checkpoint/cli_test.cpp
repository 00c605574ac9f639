// sigma-ckpt as a user runs it: ls, verify (clean and damaged), inspect,
// diff, and a safetensors round trip through export and import.
#include <sigma/checkpoint.hpp>

#include "state.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace sigma::checkpoint {
namespace {

struct CliRun {
  int code = -1;
  std::string out;
};

CliRun cli(const std::string& args) {
  CliRun r;
  FILE* p = ::popen((std::string(SIGMA_CKPT) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class CkptCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = ::testing::TempDir() + "ckpt-cli-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    Options o;
    o.dir = dir;
    o.chunk_bytes = 64 << 10;
    o.compression = Compression::always;  // a damaged base chunk is read by the delta's
    Engine e(o);
    s1 = e.save(testing::State(1).views(), testing::meta_for(1)).path;
    s2 = e.save(testing::State(2).views(), testing::meta_for(2)).path;
  }
  std::string dir, s1, s2;
};

TEST_F(CkptCli, LsInspectAndVerifyShowWhatIsThere) {
  CliRun r = cli("ls " + dir);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("base"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("delta of 1"), std::string::npos) << r.out;
  r = cli("inspect " + s2);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("layers.0.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("delta of step 1"), std::string::npos) << r.out;
  r = cli("verify " + dir);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("2 of 2 shards verified, 0 damaged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 step(s) tied together by their global manifest, 0 damaged, 0 incomplete"),
            std::string::npos)
      << r.out;
  // A step whose global manifest is gone is incomplete (not damage); one
  // whose global manifest is damaged is.
  std::filesystem::remove(s2 + "/../global.sgcs");
  {
    std::fstream f(s1 + "/../global.sgcs", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put('X');
  }
  r = cli("ls " + dir);
  EXPECT_NE(r.out.find("INCOMPLETE: no global manifest"), std::string::npos) << r.out;
  r = cli("verify " + dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("0 step(s) tied together by their global manifest, 1 damaged, 1 incomplete"),
            std::string::npos)
      << r.out;
}

// Every single damaged byte of a global manifest is damage, never "ok" and
// never "incomplete": the manifest carries its own checksum. So is a
// manifest copied in from another step, or one that is a dangling link.
TEST_F(CkptCli, EveryDamagedByteOfAGlobalManifestIsReportedAsDamage) {
  const std::string step1 = std::filesystem::path(s1).parent_path().string();
  const std::string g = step1 + "/global.sgcs";
  std::ifstream in(g, std::ios::binary);
  const std::string orig((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  ASSERT_GT(orig.size(), 64u);
  auto write = [&](const std::string& bytes) {
    std::ofstream(g, std::ios::binary | std::ios::trunc) << bytes;
  };
  // Every byte through the library's check (what the command runs), and
  // every 16th through the command itself (a process a flip, which the
  // sanitizer builds make slow).
  std::vector<size_t> missed;
  for (size_t i = 0; i < orig.size(); ++i) {
    std::string b = orig;
    b[i] = static_cast<char>(b[i] ^ 0x5a);
    write(b);
    bool refused = false;
    try {
      verify_step(step1, /*shards_too=*/false);
    } catch (const Error&) {
      refused = true;
    }
    if (refused && (i % 16 == 0 || i + 1 == orig.size())) {
      const CliRun r = cli("verify " + step1);
      refused = r.code == 1 && r.out.find("1 damaged, 0 incomplete") != std::string::npos;
    }
    if (!refused) missed.push_back(i);
  }
  EXPECT_TRUE(missed.empty()) << missed.size() << " of " << orig.size()
                              << " damaged bytes went unseen, the first at offset " << missed.front();
  write(orig);
  EXPECT_EQ(cli("verify " + dir).code, 0);
  // Step 2's manifest in step 1's folder.
  std::filesystem::copy_file(s2 + "/../global.sgcs", g, std::filesystem::copy_options::overwrite_existing);
  CliRun r = cli("verify " + step1);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("records step 2 but lies in the folder of step 1"), std::string::npos) << r.out;
  std::filesystem::remove(g);
  std::filesystem::create_symlink(dir + "/nowhere", g);
  r = cli("verify " + step1);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("1 damaged, 0 incomplete"), std::string::npos) << r.out;
}

// On a slow device the automatic choice compresses, on a fast one it stores
// raw, and inspect says so per chunk with the figures (stated rates: the
// choice is the test's, not this machine's).
TEST_F(CkptCli, InspectSaysWhichChunksWentWhichWayAndWhy) {
  for (const double rate : {10e6, 1e12}) {
    Options o;
    o.dir = dir + "/rates";
    o.job = rate < 1e9 ? "slow" : "fast";
    o.chunk_bytes = 64 << 10;
    o.disk_read_bytes_per_s = o.disk_write_bytes_per_s = rate;
    Engine e(o);
    const std::string path = e.save(testing::State(1).views(), testing::meta_for(1)).path;
    const CliRun r = cli("inspect --chunks " + path);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("format  2"), std::string::npos) << r.out;
    const std::string rates = rate < 1e9 ? "10 MB/s read and 10 MB/s write" : "1000000 MB/s read";
    EXPECT_NE(r.out.find("codecs  automatic: per chunk, against the device's " + rates), std::string::npos)
        << r.out;
    const std::string way = rate < 1e9 ? "zstd      sampled ratio" : "raw       sampled ratio";
    EXPECT_NE(r.out.find(way), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("zstd saves at"), std::string::npos) << r.out;
  }
  // Forced modes say so.
  Options o;
  o.dir = dir + "/forced";
  o.compression = Compression::never;
  Engine e(o);
  const std::string path = e.save(testing::State(1).views(), testing::meta_for(1)).path;
  const CliRun r = cli("inspect --chunks " + path);
  EXPECT_NE(r.out.find("codecs  raw, every chunk (forced)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("raw       raw (forced)"), std::string::npos) << r.out;
}

TEST_F(CkptCli, VerifyExitsNonZeroAndNamesTheDamage) {
  {
    std::fstream f(s1 + "/data.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x5a');
  }
  const CliRun r = cli("verify " + dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("DAMAGED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("xxh3"), std::string::npos) << r.out;
  // The delta on top of the damaged base is damaged too, and says where.
  EXPECT_NE(r.out.find("0 of 2 shards verified, 2 damaged"), std::string::npos) << r.out;
}

TEST_F(CkptCli, DiffSaysWhichTensorsChangedAndHowMuch) {
  CliRun r = cli("diff " + s1 + " " + s2);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("layers.1.weight"), std::string::npos);
  EXPECT_NE(r.out.find("differs"), std::string::npos);
  r = cli("diff " + s2 + " " + s2);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("0 tensor(s) differ"), std::string::npos) << r.out;
}

TEST_F(CkptCli, SafetensorsRoundTripsAndBadFilesAreRefused) {
  const std::string st = dir + "/w.safetensors";
  CliRun r = cli("export " + s2 + " --safetensors " + st);
  ASSERT_EQ(r.code, 0) << r.out;
  r = cli("import " + st + " --dir " + dir + "/imp --step 2");
  ASSERT_EQ(r.code, 0) << r.out;
  r = cli("diff " + s2 + " " + dir + "/imp/imported/step-00000000000000000002/rank-00000");
  EXPECT_EQ(r.code, 0) << r.out;
  std::map<std::string, std::string> meta;
  const auto tensors = import_safetensors(st, &meta);
  EXPECT_EQ(tensors.size(), 5u);
  EXPECT_EQ(meta["sigma.step"], "2");
  // A header that promises more bytes than the file has.
  std::ofstream(dir + "/bad.safetensors", std::ios::binary)
      << std::string("\xff\xff\x00\x00\x00\x00\x00\x00{}", 10);
  r = cli("import " + dir + "/bad.safetensors --dir " + dir + "/imp2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("header length"), std::string::npos) << r.out;
  r = cli("inspect " + dir);  // not a shard
  EXPECT_EQ(r.code, 2) << r.out;
}

}  // namespace
}  // namespace sigma::checkpoint
