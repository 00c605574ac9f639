// The cuda vendor as a user meets it. Without a GPU: loading fails with
// UNAVAILABLE and a message quoting the CUDA error; with a broken driver,
// INTERNAL. With one: the device,
// its telemetry from NVML and its self-test.
#include <sigma/hal.hpp>

#include "gpu.hpp"

#include <gtest/gtest.h>

namespace {

TEST(CudaVendor, WithoutAGpuLoadingSaysUnavailableAndQuotesTheCudaError) {
  const sigma_cuda::GpuPresence gpu = sigma_cuda::probe_gpu();
  if (gpu.presence == sigma_cuda::Presence::usable) GTEST_SKIP() << "skipped: this machine has a GPU";
  try {
    sigma::hal::Plugin::load("cuda");
    FAIL() << "loaded without a usable GPU";
  } catch (const sigma::hal::PluginInitError& e) {
    // No GPU: unavailable (a skip for the conformance suite). A GPU whose
    // driver fails: an internal error (a failure), never "unavailable".
    EXPECT_EQ(e.code(),
              gpu.presence == sigma_cuda::Presence::none ? sigma::Code::unavailable : sigma::Code::internal)
        << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("cudaGetDeviceCount"), std::string::npos) << m;
  }
}

TEST(CudaVendor, OptionsAreRefusedByNameBeforeAnyDeviceIsLookedFor) {
  sigma::hal::LoadOptions lo;
  lo.options = "colour=red";
  try {
    sigma::hal::Plugin::load("cuda", lo);
    FAIL() << "unknown options were accepted";
  } catch (const sigma::Error& e) {
    EXPECT_EQ(e.code(), sigma::Code::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("colour=red"), std::string::npos) << e.what();
  }
}

TEST(CudaVendor, OnAGpuTheDeviceTelemetryAndSelfTestWork) {
  SIGMA_REQUIRE_GPU();
  auto p = sigma::hal::Plugin::load("cuda");
  const hal_api_t& api = p->api();
  hal_device_props_t props{};
  props.struct_size = sizeof props;
  ASSERT_EQ(api.device->get_props(0, &props), HAL_OK) << api.get_last_error();
  EXPECT_EQ(props.memory_kind, HAL_MEMORY_DEVICE);
  EXPECT_GT(props.memory_bytes, 0u);
  uint32_t n = 0;
  ASSERT_EQ(api.telemetry->list_fields(0, nullptr, 0, &n), HAL_OK);
  std::vector<hal_field_info_t> fields(n);
  ASSERT_EQ(api.telemetry->list_fields(0, fields.data(), n, &n), HAL_OK);
  std::vector<hal_field_id_t> ids;
  for (const auto& f : fields) ids.push_back(f.id);
  std::vector<hal_telemetry_sample_t> s(n);
  ASSERT_EQ(api.telemetry->read(0, ids.data(), n, s.data()), HAL_OK);
  for (const auto& x : s) {
    if (x.id == HAL_FIELD_TEMPERATURE_C && x.status == HAL_OK) {
      EXPECT_GT(x.value.f64, 0.0);
      EXPECT_LT(x.value.f64, 150.0);
    }
    EXPECT_TRUE(x.status == HAL_OK || x.status == HAL_ERR_NOT_SUPPORTED) << x.id;
  }
  hal_self_test_result_t r{};
  r.struct_size = sizeof r;
  ASSERT_EQ(api.device->self_test(0, 16u << 20, &r), HAL_OK) << api.get_last_error();
  EXPECT_EQ(r.passed, 1u) << r.message;
  std::printf("cuda self-test: %s\n", r.message);
}

}  // namespace
