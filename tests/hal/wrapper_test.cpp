// The C++ owners over the skeleton plugin: memory, communicators, requests,
// fault paths and the errors they raise.
#include <sigma/hal.hpp>

#include <gtest/gtest.h>

#include <cmath>

#include <cstdlib>
#include <thread>

namespace sigma::hal {
namespace {

using namespace std::chrono_literals;

hal_comm_create_args_t world_of_one() {
  hal_comm_create_args_t a{};
  a.struct_size = sizeof(a);
  a.world_size = 1;
  a.timeout_ns = 1'000'000'000ull;
  return a;
}

hal_coll_args_t all_reduce(void* buf, uint64_t count) {
  hal_coll_args_t a{};
  a.struct_size = sizeof(a);
  a.op = HAL_COLL_ALL_REDUCE;
  a.dtype = HAL_DTYPE_F32;
  a.count = count;
  a.sendbuf = a.recvbuf = buf;
  return a;
}

void inject(const PluginPtr& p, hal_fault_kind_t kind) {
  hal_fault_spec_t spec{};
  spec.struct_size = sizeof(spec);
  spec.kind = kind;
  p->check(p->fault_injection()->inject(&spec), "inject");
}

// Hangs the next op, then runs one with a 100 ms bound: it must throw
// Error(timeout), saying the communicator was aborted, within 3 s.
void expect_hung_run_times_out(const PluginPtr& p, Communicator& comm, Buffer& b) {
  inject(p, HAL_FAULT_HANG);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    comm.run(all_reduce(b.data(), 4), 100ms);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::timeout);
    EXPECT_NE(std::string(e.what()).find("all_reduce did not finish"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the communicator was aborted"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST(Buffer, RoundTripsBytesAndRefusesRangesPastItsEnd) {
  auto p = Plugin::load("skeleton");
  Buffer b(p, 0, 1024);
  std::vector<uint8_t> in(1024), out(1024);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  b.copy_from_host(in.data(), in.size());
  b.copy_to_host(out.data(), out.size());
  EXPECT_EQ(in, out);
  EXPECT_THROW(b.copy_from_host(in.data(), 1000, 100), Error);
  EXPECT_THROW(b.copy_to_host(out.data(), 1, 1024), Error);
}

TEST(Buffer, AllocationBeyondTheDeviceIsOutOfMemoryWithTheFigures) {
  auto p = Plugin::load("skeleton");
  try {
    Buffer b(p, 0, 2ull << 30);
    FAIL() << "allocated";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("hal_device_api_t.mem_alloc"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2147483648 bytes asked"), std::string::npos) << e.what();
  }
}

TEST(Communicator, PostAndWaitComputeAnAllReduce) {
  auto p = Plugin::load("skeleton");
  Communicator comm(p, world_of_one());
  Buffer send(p, 0, 16), recv(p, 0, 16);
  const std::vector<float> v = {1, 2, 3, 4}, zeros(4, 0.0f);
  send.copy_from_host(v.data(), 16);
  recv.copy_from_host(zeros.data(), 16);
  // Out of place, so the result is only there if the op wrote it.
  hal_coll_args_t a = all_reduce(send.data(), 4);
  a.recvbuf = recv.data();
  auto req = comm.post(a);
  EXPECT_TRUE(req.wait(1s));
  EXPECT_TRUE(req.test());
  EXPECT_EQ(comm.async_error(), HAL_OK);
  std::vector<float> out(4, -1.0f);
  recv.copy_to_host(out.data(), 16);
  EXPECT_EQ(out, v);  // the sum over a world of one
}

TEST(Communicator, WorldSizeTheSkeletonCannotDoIsNotSupported) {
  auto p = Plugin::load("skeleton");
  auto args = world_of_one();
  args.world_size = 2;
  try {
    Communicator comm(p, args);
    FAIL() << "created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::not_supported);
    EXPECT_NE(std::string(e.what()).find("only world size 1"), std::string::npos) << e.what();
  }
}

TEST(Request, WaitTimesOutThenAbortFromAnotherThreadEndsIt) {
  auto p = Plugin::load("skeleton");
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 16);
  inject(p, HAL_FAULT_HANG);
  auto req = comm.post(all_reduce(b.data(), 4));
  EXPECT_FALSE(req.wait(50ms));
  EXPECT_FALSE(req.test());
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    comm.abort();
  });
  try {
    req.wait(30s);
    ADD_FAILURE() << "wait returned normally after abort";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::aborted);
  }
  t.join();
  EXPECT_EQ(comm.async_error(), HAL_ERR_ABORTED);
  EXPECT_THROW(comm.post(all_reduce(b.data(), 4)), Error);
}

TEST(Communicator, BlockingRunAbortsTheCommunicatorWhenItTimesOut) {
  auto p = Plugin::load("skeleton");
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 16);
  comm.run(all_reduce(b.data(), 4), 1s);  // a healthy op just completes
  expect_hung_run_times_out(p, comm, b);
  EXPECT_EQ(comm.async_error(), HAL_ERR_ABORTED);  // the helper aborted it
}

// A plugin with its own blocking run (ABI 1.1): sim, whose run goes to
// cpu's when healthy and posts, waits and aborts when the op hangs.
TEST(Communicator, RunGoesThroughThePluginsOwnRunAndItsTimeoutAbortsTheCommunicator) {
  auto p = Plugin::load("sim");
  ASSERT_NE(p->coll_run(), nullptr);
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 16);
  const float ones[4] = {1, 1, 1, 1};
  b.copy_from_host(ones, sizeof(ones));
  comm.run(all_reduce(b.data(), 4), 1s);
  float out[4] = {};
  b.copy_to_host(out, sizeof(out));
  EXPECT_EQ(out[3], 1.0f);
  expect_hung_run_times_out(p, comm, b);
  EXPECT_EQ(comm.async_error(), HAL_ERR_TIMEOUT);  // the plugin's run says why
  EXPECT_THROW(comm.run(all_reduce(b.data(), 4), 1s), Error);
  p->check(p->fault_injection()->clear(0), "clear");
}

TEST(Request, DeviceLostFailsPendingWorkWithDeviceLost) {
  auto p = Plugin::load("skeleton");
  Communicator comm(p, world_of_one());
  Buffer b(p, 0, 16);
  inject(p, HAL_FAULT_HANG);
  auto req = comm.post(all_reduce(b.data(), 4));
  inject(p, HAL_FAULT_DEVICE_LOST);
  try {
    req.wait(5s);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::device_lost);
  }
  EXPECT_EQ(comm.async_error(), HAL_ERR_DEVICE_LOST);
  p->check(p->fault_injection()->clear(0), "clear");
}

// A request that ignores abort: its owner's destructor waits the
// communicator's bound, aborts, waits the bound again and then abandons it,
// instead of hanging the host.
TEST(Request, OneThatIgnoresAbortIsAbandonedAfterTheCommunicatorsBound) {
  ::setenv("SIGMA_BAD_MISBEHAVE", "deaf:collective", 1);
  {
    auto p = Plugin::load(std::string(SIGMA_BAD_PLUGIN_DIR) + "/misbehave.so");
    auto args = world_of_one();
    args.timeout_ns = 200'000'000ull;  // 0.2 s
    Communicator comm(p, args);
    Buffer b(p, 0, 16);
    const auto t0 = std::chrono::steady_clock::now();
    {
      auto req = comm.post(all_reduce(b.data(), 4));
      EXPECT_FALSE(req.wait(10ms));
      ::testing::internal::CaptureStderr();
    }
    const std::string said = ::testing::internal::GetCapturedStderr();
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, 400ms);  // the bound, the abort, the bound again
    EXPECT_LT(took, 3s);
    EXPECT_NE(said.find("abandoned (the plugin ignores abort"), std::string::npos) << said;
  }
  ::unsetenv("SIGMA_BAD_MISBEHAVE");
}

TEST(Request, InProgressFromAWaitWithATimeoutIsNamedAsAPluginBug) {
  ::setenv("SIGMA_BAD_MISBEHAVE", "inprogress:collective", 1);
  {
    auto p = Plugin::load(std::string(SIGMA_BAD_PLUGIN_DIR) + "/misbehave.so");
    auto args = world_of_one();
    args.timeout_ns = 50'000'000ull;
    Communicator comm(p, args);
    Buffer b(p, 0, 16);
    auto req = comm.post(all_reduce(b.data(), 4));
    try {
      req.wait(10ms);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::internal);
      EXPECT_NE(std::string(e.what()).find("returned HAL_IN_PROGRESS after a timeout"), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(req.test());
    ::testing::internal::CaptureStderr();
  }
  ::testing::internal::GetCapturedStderr();
  ::unsetenv("SIGMA_BAD_MISBEHAVE");
}

TEST(Names, DtypesOpsAndReductionsHaveStableNames) {
  EXPECT_EQ(dtype_name(HAL_DTYPE_BF16), "bf16");
  EXPECT_EQ(dtype_size(HAL_DTYPE_BF16), 2u);
  EXPECT_EQ(dtype_size(99), 0u);
  EXPECT_EQ(coll_op_name(HAL_COLL_ALL_TO_ALLV), "all_to_allv");
  EXPECT_EQ(reduce_op_name(HAL_REDUCE_AVG), "avg");
  EXPECT_EQ(dtype_name(99), "dtype 99");
}

TEST(Dtypes, AnElementOfEveryDtypeReadsAsItsValue) {
  const auto f16 = [](uint16_t h) { return element_as_double(&h, HAL_DTYPE_F16); };
  EXPECT_EQ(f16(0x3C00), 1.0);
  EXPECT_EQ(f16(0xC000), -2.0);
  EXPECT_EQ(f16(0x0001), std::ldexp(1.0, -24));  // the smallest subnormal
  EXPECT_EQ(f16(0x7BFF), 65504.0);
  EXPECT_TRUE(std::isinf(f16(0x7C00)));
  EXPECT_TRUE(std::isnan(f16(0x7E00)));
  const uint16_t bf = 0x3FC0;  // 1.5
  EXPECT_EQ(element_as_double(&bf, HAL_DTYPE_BF16), 1.5);
  const int64_t i64 = -5;
  EXPECT_EQ(element_as_double(&i64, HAL_DTYPE_I64), -5.0);
  const uint8_t unaligned[9] = {0, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F};  // 1.0 at offset 1
  EXPECT_EQ(element_as_double(unaligned + 1, HAL_DTYPE_F64), 1.0);
  const uint8_t u8 = 200;
  EXPECT_EQ(element_as_double(&u8, HAL_DTYPE_U8), 200.0);
  EXPECT_TRUE(std::isnan(element_as_double(&u8, static_cast<hal_dtype_t>(99))));
}

}  // namespace
}  // namespace sigma::hal
