// The loader against the skeleton and against deliberately broken plugins:
// each defect gets its own precise error, and nothing crashes.
#include <sigma/hal.hpp>
#include <sigma/kernels.hpp>

#include <dlfcn.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace sigma::hal {
namespace {

std::string bad(const std::string& kind) { return std::string(SIGMA_BAD_PLUGIN_DIR) + "/" + kind + ".so"; }

// Loads `spec`, expects an Error with `code` whose message contains every
// string in `parts`.
void expect_load_error(const std::string& spec, Code code, std::initializer_list<std::string> parts) {
  try {
    auto p = Plugin::load(spec);
    FAIL() << spec << " loaded, but it should not";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
    }
  }
}

// An all-reduce over a world of one runs on `p` and leaves its input.
void expect_one_rank_all_reduce(const PluginPtr& p) {
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.world_size = 1;
  ca.timeout_ns = 1'000'000'000ull;
  Communicator comm(p, ca);
  Buffer b(p, 0, 16);
  const float x[4] = {1, 2, 3, 4};
  b.copy_from_host(x, sizeof(x));
  comm.run(coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, 4, b.data(), b.data()), std::chrono::seconds(1));
  float out[4] = {};
  b.copy_to_host(out, sizeof(out));
  EXPECT_EQ(out[3], 4.0f);
}

TEST(Loader, LoadsTheSkeletonByShortName) {
  auto p = Plugin::load("skeleton");
  EXPECT_EQ(p->name(), "skeleton");
  EXPECT_EQ(p->device_count(), 1u);
  EXPECT_NE(p->path().find("libsigma_hal_skeleton.so"), std::string::npos);
  EXPECT_NE(p->fault_injection(), nullptr);
  EXPECT_FALSE(p->has_streams());
}

TEST(Loader, LoadsTheSkeletonByPath) {
  auto p = Plugin::load(std::string(SIGMA_PLUGIN_OUTPUT_DIR) + "/libsigma_hal_skeleton.so");
  EXPECT_EQ(p->name(), "skeleton");
}

TEST(Loader, UnknownNameSaysWhereItSearched) {
  expect_load_error("nonexistent_vendor", Code::unavailable,
                    {"nonexistent_vendor", "libsigma_hal_nonexistent_vendor.so", SIGMA_PLUGIN_OUTPUT_DIR,
                     "SIGMA_HAL_PLUGIN_PATH"});
}

TEST(Loader, AnExplicitPathThatFailsNeverFallsBackToAnotherPlugin) {
  // "skeleton" exists on the search path, but the caller asked for this file.
  expect_load_error("/nonexistent/dir/libsigma_hal_skeleton.so", Code::unavailable,
                    {"/nonexistent/dir/libsigma_hal_skeleton.so"});
}

TEST(Loader, AFileThatIsNotASharedObjectNamesTheFile) {
  const std::string path = ::testing::TempDir() + "not_a_plugin.so";
  std::ofstream(path) << "this is text";
  expect_load_error(path, Code::unavailable, {path, "cannot load"});
}

TEST(Loader, MissingDiscoverySymbolIsNamed) {
  expect_load_error(bad("missing_symbol"), Code::invalid_argument, {"missing_symbol.so", "hal_get_api_v1"});
}

TEST(Loader, RootTableSmallerThanAbi10IsRefusedWithBothSizes) {
  expect_load_error(bad("small_root"), Code::invalid_argument,
                    {"small_root.so", "hal_api_t.struct_size", std::to_string(HAL_API_V1_0_SIZE - 16),
                     std::to_string(HAL_API_V1_0_SIZE)});
}

TEST(Loader, RootTableLargerWithUnknownTrailingEntriesLoads) {
  auto p = Plugin::load(bad("large_root"));
  EXPECT_GT(p->api().struct_size, static_cast<uint64_t>(HAL_API_V1_0_SIZE));
  EXPECT_EQ(p->device_count(), 1u);
}

// It also sets HAL_CAP_KERNELS, which 1.2 defined: ignored, not refused
// (hal.h, version rule 5), and no kernels extension is offered.
TEST(Loader, AnAbi10PluginLoadsAndTheRunItLacksAndTheBitsItCannotMeanAreIgnored) {
  auto p = Plugin::load(bad("old_minor"));
  EXPECT_EQ(p->api().abi_minor, 0u);
  EXPECT_NE(p->api().capabilities & HAL_CAP_KERNELS, 0u);
  EXPECT_EQ(p->kernels(), nullptr);
  EXPECT_EQ(p->coll_run(), nullptr);  // the slot past struct_size is garbage
  expect_one_rank_all_reduce(p);      // posted and waited for, as before 1.1
}

// The skeleton built from each released version's frozen header
// (sigma/abi/hal_1_<minor>.h) loads into today's host: its tables have that
// version's sizes, what a later version added is absent, not read, and a
// collective runs (posted and waited for where there is no run).
TEST(Loader, PluginsBuiltFromEachReleasedHeaderLoadAndRun) {
  for (uint32_t minor : {0u, 1u, 2u}) {
    SCOPED_TRACE("ABI 1." + std::to_string(minor));
    auto p =
        Plugin::load(std::string(SIGMA_ABI_PLUGIN_DIR) + "/skeleton_abi_1_" + std::to_string(minor) + ".so");
    EXPECT_EQ(p->api().abi_minor, minor);
    const uint64_t coll_size =
        minor == 0 ? uint64_t{HAL_COLL_API_V1_0_SIZE} : uint64_t{HAL_COLL_API_V1_1_SIZE};
    EXPECT_EQ(p->coll_api().struct_size, coll_size);
    EXPECT_EQ(p->api().struct_size, uint64_t{HAL_API_V1_0_SIZE});
    EXPECT_EQ(p->coll_run(), nullptr);  // the skeleton offers none; from 1.0 the slot is not even there
    EXPECT_EQ(p->kernels(), nullptr);
    expect_one_rank_all_reduce(p);
  }
}

// A 1.2 plugin's kernels extension has positional entries: today's host
// reads it as hal_ext_kernels_v1_2_t and calls through its adapter, never
// as 1.3's args-struct entries.
TEST(Loader, AnAbi12PluginsPositionalKernelEntryIsCalledThroughTheAdapter) {
  const std::string path = std::string(SIGMA_ABI_PLUGIN_DIR) + "/kernels_abi_1_2.so";
  auto p = Plugin::load(path);
  EXPECT_EQ(p->api().abi_minor, 2u);
  EXPECT_EQ(p->kernels(), nullptr);
  ASSERT_NE(p->kernels_v1_2(), nullptr);
  const KernelEntries k(*p);
  EXPECT_TRUE(k.has(KernelEntries::Entry::checksum));
  EXPECT_FALSE(k.has(KernelEntries::Entry::grad_scan));
  EXPECT_FALSE(p->host_addressable(0));
  std::vector<uint8_t> host(4099);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 31 + 7);
  Buffer b(p, 0, host.size());
  b.copy_from_host(host.data(), host.size());
  const kernels::Place at{p.get(), 0};
  EXPECT_EQ(kernels::checksum_parallel(at, b.data(), host.size()),
            kernels::checksum_parallel(host.data(), host.size()));
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto* calls = reinterpret_cast<unsigned long long (*)()>(::dlsym(h, "abi_1_2_checksum_calls"));
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(calls(), 1u);  // the entry ran; nothing was staged
  ::dlclose(h);
}

TEST(Loader, NullRequiredEntryIsNamed) {
  expect_load_error(bad("null_required"), Code::invalid_argument,
                    {"null_required.so", "hal_coll_api_t.comm_abort is NULL", "required"});
}

TEST(Loader, WrongMajorIsNotSupportedAndSaysBothMajors) {
  expect_load_error(bad("wrong_major"), Code::not_supported,
                    {"wrong_major.so", "major " + std::to_string(HAL_ABI_MAJOR + 1),
                     "supports major " + std::to_string(HAL_ABI_MAJOR)});
}

TEST(Loader, PluginThatRefusesTheHostAbiIsNamed) {
  expect_load_error(bad("returns_null"), Code::not_supported, {"returns_null.so", "returned NULL"});
}

TEST(Loader, SubTableSmallerThanAbi10IsRefused) {
  expect_load_error(bad("small_subtable"), Code::invalid_argument,
                    {"small_subtable.so", "hal_coll_api_t.struct_size"});
}

TEST(Loader, InitFailureCarriesThePluginsOwnMessage) {
  try {
    Plugin::load(bad("init_unavailable"));
    FAIL() << "loaded";
  } catch (const PluginInitError& e) {
    EXPECT_EQ(e.code(), Code::unavailable);
    EXPECT_NE(std::string(e.what()).find("no accelerator found (driver returned error 100)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("hal_api_t.init"), std::string::npos) << e.what();
  }
}

TEST(Loader, UndefinedStatusIsAnInternalErrorNamingTheEntry) {
  auto p = Plugin::load(bad("undefined_status"));
  try {
    p->device_count();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::internal);
    EXPECT_NE(std::string(e.what()).find("hal_device_api_t.get_count"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("undefined status 42"), std::string::npos) << e.what();
  }
}

TEST(Loader, ADiscoverySymbolThatIsDataIsRefusedNotCalled) {
  expect_load_error(bad("data_symbol"), Code::invalid_argument,
                    {"data_symbol.so", "exports hal_get_api_v1 as a data object, not a function"});
}

TEST(Loader, AnotherMajorIsRefusedForItsMajorWhateverItsSize) {
  expect_load_error(
      bad("wrong_major_small_root"), Code::not_supported,
      {"wrong_major_small_root.so", "implements HAL ABI major " + std::to_string(HAL_ABI_MAJOR + 1)});
}

TEST(Loader, ANullLastErrorIsNamedNotRead) {
  try {
    Plugin::load(bad("null_last_error"));
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("get_last_error returned NULL: plugin bug"), std::string::npos)
        << e.what();
  }
}

TEST(Loader, AHugeLastErrorIsCutToFourKiB) {
  try {
    Plugin::load(bad("long_last_error"));
    FAIL() << "loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_LT(what.size(), 5000u);
    EXPECT_NE(what.find("message cut at 4096 bytes"), std::string::npos) << what.substr(0, 200);
  }
}

TEST(Loader, AFieldCountPastTheBoundIsRefusedBeforeAnyAllocation) {
  auto p = Plugin::load(bad("huge_field_count"));
  try {
    p->telemetry_fields(0);
    FAIL() << "four billion fields were listed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::internal);
    EXPECT_NE(std::string(e.what()).find("says 4294967295 fields, more than the 4096"), std::string::npos)
        << e.what();
  }
}

TEST(Loader, AListingThatWritesPastItsCapacityIsCaught) {
  auto p = Plugin::load(bad("field_overrun"));
  try {
    p->telemetry_fields(0);
    FAIL() << "the overrun went unseen";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrote past the capacity of 2 entries"), std::string::npos)
        << e.what();
  }
}

TEST(Loader, UnloadAndLoadAgainGivesAFreshPlugin) {
  for (int i = 0; i < 3; ++i) {
    auto p = Plugin::load("skeleton");
    Buffer b(p, 0, 1 << 16);
    auto s = p->read_telemetry(0, {HAL_FIELD_MEMORY_USED_BYTES});
    EXPECT_EQ(s[0].status, HAL_OK);
    EXPECT_EQ(s[0].value.u64, 1u << 16);  // nothing left over from the last round
  }
}

TEST(Loader, TwoLoadsShareOneReferenceCountedPlugin) {
  auto a = Plugin::load("skeleton");
  Buffer keep(a, 0, 4096);
  {
    auto b = Plugin::load("skeleton");
    EXPECT_EQ(&a->api(), &b->api());
  }
  // b's finalize did not tear down a's state.
  auto s = a->read_telemetry(0, {HAL_FIELD_MEMORY_USED_BYTES});
  EXPECT_EQ(s[0].value.u64, 4096u);
}

TEST(Loader, SearchPathHonoursTheEnvironmentFirst) {
  const char* old = std::getenv("SIGMA_HAL_PLUGIN_PATH");
  const std::string saved = old ? old : "";
  ::setenv("SIGMA_HAL_PLUGIN_PATH", (std::string("/first:") + SIGMA_PLUGIN_OUTPUT_DIR).c_str(), 1);
  auto dirs = plugin_search_path();
  ASSERT_GE(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], "/first");
  EXPECT_EQ(dirs[1], SIGMA_PLUGIN_OUTPUT_DIR);
  EXPECT_EQ(resolve_plugin("skeleton"), std::string(SIGMA_PLUGIN_OUTPUT_DIR) + "/libsigma_hal_skeleton.so");
  ::setenv("SIGMA_HAL_PLUGIN_PATH", saved.c_str(), 1);
}

}  // namespace
}  // namespace sigma::hal
