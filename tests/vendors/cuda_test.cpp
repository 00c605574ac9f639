// The cuda vendor as a user meets it. Without a GPU: loading fails with
// UNAVAILABLE and a message quoting the CUDA error. With one: the device,
// its telemetry from NVML and its self-test.
#include <sigma/hal.hpp>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(CudaVendor, WithoutAGpuLoadingSaysUnavailableAndQuotesTheCudaError) {
  if (have_gpu()) GTEST_SKIP() << "skipped: this machine has a GPU";
  try {
    sigma::hal::Plugin::load("cuda");
    FAIL() << "loaded without a GPU";
  } catch (const sigma::hal::PluginInitError& e) {
    EXPECT_EQ(e.code(), sigma::Code::unavailable);
    const std::string m = e.what();
    EXPECT_NE(m.find("cudaGetDeviceCount"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaError"), std::string::npos) << m;
  }
}

TEST(CudaVendor, OptionsAreRefusedByName) {
  sigma::hal::LoadOptions lo;
  lo.options = "colour=red";
  try {
    sigma::hal::Plugin::load("cuda", lo);
    FAIL();
  } catch (const sigma::Error& e) {
    // Without a GPU the device check may come first; either way it says why.
    EXPECT_TRUE(std::string(e.what()).find("colour=red") != std::string::npos ||
                e.code() == sigma::Code::unavailable) << e.what();
  }
}

TEST(CudaVendor, OnAGpuTheDeviceTelemetryAndSelfTestWork) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no CUDA device";
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
