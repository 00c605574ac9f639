// The collective matrix against the host reference, argument checks,
// pipelining, and the timeout / abort paths with a hung peer.
#include "reference.hpp"
#include "suite.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

namespace sigma::conformance {
namespace {

using hal::Buffer;
using hal::Communicator;

struct Case {
  hal_coll_op_t op;
  hal_dtype_t dtype;
  hal_reduce_op_t red = HAL_REDUCE_SUM;
  uint64_t count = 0;
  bool in_place = false;
  uint32_t root = 0;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << hal::coll_op_name(c.op) << " " << hal::dtype_name(c.dtype);
  if (c.op == HAL_COLL_ALL_REDUCE || c.op == HAL_COLL_REDUCE_SCATTER) s << " " << hal::reduce_op_name(c.red);
  s << " count " << c.count << (c.in_place ? " in-place" : "");
  if (c.op == HAL_COLL_BROADCAST) s << " root " << c.root;
  return s.str();
}

bool is_reducing(hal_coll_op_t op) { return op == HAL_COLL_ALL_REDUCE || op == HAL_COLL_REDUCE_SCATTER; }

// all_to_allv block sizes: rank `from` sends this many elements to rank `to`.
uint64_t v_count(uint32_t from, uint32_t to, uint64_t scale) { return ((from * 7 + to * 3) % 4) * scale; }
// What the gaps between all_to_allv's blocks hold before and after: no
// block's value (those are below 97), exact in every dtype.
constexpr double kGap = 99;
// Value of element k of the block from `from` to `to`.
double v_value(uint32_t from, uint32_t to, uint64_t k) {
  return static_cast<double>((from * 31 + to * 7 + k) % 97);
}

hal_coll_args_t base_args(const Case& c) {
  hal_coll_args_t a{};
  a.struct_size = sizeof(a);
  a.op = c.op;
  a.dtype = c.dtype;
  a.reduce_op = c.red;
  a.root = c.root;
  a.count = c.count;
  return a;
}

uint64_t ns(std::chrono::milliseconds t) { return static_cast<uint64_t>(t.count()) * 1000000; }

// Runs one case on this rank, posted and waited for, or through the
// plugin's blocking run (ABI 1.1) when `blocking`; returns "" or what went
// wrong.
// What element i of rank R's result must be (rd, rc: all_to_allv's receive
// displacements and counts).
double expected(const Case& c, uint32_t W, uint32_t R, uint64_t i, const std::vector<uint64_t>& rd,
                const std::vector<uint64_t>& rc) {
  double want = 0;
  switch (c.op) {
    case HAL_COLL_ALL_REDUCE:
      want = reduced_value(c.dtype, c.red, W, i);
      break;
    case HAL_COLL_REDUCE_SCATTER:
      want = reduced_value(c.dtype, c.red, W, R * c.count + i);
      break;
    case HAL_COLL_ALL_GATHER:
      want = input_value(c.dtype, false, c.red, static_cast<uint32_t>(i / c.count), i % c.count);
      break;
    case HAL_COLL_BROADCAST:
      want = input_value(c.dtype, false, c.red, c.root, i);
      break;
    case HAL_COLL_ALL_TO_ALL: {
      // Block j of the output came from rank j's block R.
      const uint32_t from = static_cast<uint32_t>(i / c.count);
      want = input_value(c.dtype, false, c.red, from, R * c.count + i % c.count);
      break;
    }
    case HAL_COLL_ALL_TO_ALLV: {
      want = kGap;
      for (uint32_t from = 0; from < W; ++from)
        if (i >= rd[from] && i < rd[from] + rc[from]) want = v_value(from, R, i - rd[from]);
      break;
    }
    default:
      break;
  }
  return want;
}

std::string run_case(Context& ctx, Communicator& comm, const Case& c, bool blocking = false) {
  const uint32_t W = ctx.world(), R = ctx.rank();
  const uint64_t es = hal::dtype_size(c.dtype);
  const bool red = is_reducing(c.op);
  uint64_t n_in = c.count, n_out = c.count;
  if (c.op == HAL_COLL_ALL_GATHER) n_out = c.count * W;
  if (c.op == HAL_COLL_REDUCE_SCATTER) n_in = c.count * W;
  if (c.op == HAL_COLL_ALL_TO_ALL) n_in = n_out = c.count * W;
  if (c.op == HAL_COLL_BARRIER) n_in = n_out = 0;

  std::vector<uint64_t> sc(W), sd(W), rc(W), rd(W);
  if (c.op == HAL_COLL_ALL_TO_ALLV) {
    // Blocks in reverse rank order, each after a one-element gap that must
    // stay untouched: displacements are arbitrary, not packed.
    const uint64_t scale = std::max<uint64_t>(c.count / std::max<uint32_t>(W, 1), c.count ? 1 : 0);
    n_in = n_out = 0;
    for (uint32_t j = W; j-- > 0;) {
      sc[j] = v_count(R, j, scale);
      sd[j] = ++n_in;
      n_in += sc[j];
      rc[j] = v_count(j, R, scale);
      rd[j] = ++n_out;
      n_out += rc[j];
    }
  }

  HostArray in(c.dtype, n_in);
  if (c.op == HAL_COLL_ALL_TO_ALLV) {
    for (uint32_t j = 0; j < W; ++j)
      for (uint64_t k = 0; k < sc[j]; ++k) in.set(sd[j] + k, v_value(R, j, k));
  } else {
    for (uint64_t i = 0; i < n_in; ++i) in.set(i, input_value(c.dtype, red, c.red, R, i));
  }

  auto plugin = ctx.plugin();
  hal_coll_args_t a = base_args(c);
  std::unique_ptr<Buffer> sbuf, rbuf;
  uint64_t out_offset = 0;  // element offset of the result in the receive buffer
  if (c.in_place) {
    const uint64_t n = std::max(n_in, n_out);
    rbuf = std::make_unique<Buffer>(plugin, 0, n * es);
    if (c.op == HAL_COLL_ALL_GATHER) {
      rbuf->copy_from_host(in.data(), n_in * es, R * c.count * es);
      a.sendbuf = static_cast<char*>(rbuf->data()) + R * c.count * es;
      a.recvbuf = rbuf->data();
    } else if (c.op == HAL_COLL_REDUCE_SCATTER) {
      rbuf->copy_from_host(in.data(), n_in * es);
      a.sendbuf = rbuf->data();
      a.recvbuf = static_cast<char*>(rbuf->data()) + R * c.count * es;
      out_offset = R * c.count;
    } else {
      rbuf->copy_from_host(in.data(), n_in * es);
      a.sendbuf = a.recvbuf = rbuf->data();
    }
  } else {
    sbuf = std::make_unique<Buffer>(plugin, 0, n_in * es);
    rbuf = std::make_unique<Buffer>(plugin, 0, n_out * es);
    sbuf->copy_from_host(in.data(), n_in * es);
    if (c.op == HAL_COLL_ALL_TO_ALLV) {  // the gaps' sentinel
      HostArray gaps(c.dtype, n_out);
      for (uint64_t i = 0; i < n_out; ++i) gaps.set(i, kGap);
      rbuf->copy_from_host(gaps.data(), n_out * es);
    }
    a.sendbuf = sbuf->data();
    a.recvbuf = rbuf->data();
  }
  if (c.op == HAL_COLL_ALL_TO_ALLV) {
    a.send_counts = sc.data();
    a.send_displs = sd.data();
    a.recv_counts = rc.data();
    a.recv_displs = rd.data();
  }

  if (blocking) {
    const hal_status_t st = plugin->coll_run()(comm.handle(), &a, nullptr, ns(ctx.opts().op_timeout));
    if (st != HAL_OK)
      return describe(c) + ": run returned " + hal_status_name(st) + " (" +
             message_of(plugin->api().get_last_error()) + ")";
  } else {
    auto req = comm.post(a);
    if (!req.wait(ctx.opts().op_timeout)) return describe(c) + ": not finished after the op timeout";
  }

  HostArray out(c.dtype, n_out);
  rbuf->copy_to_host(out.data(), n_out * es, out_offset * es);
  for (uint64_t i = 0; i < n_out; ++i) {
    const double want = expected(c, W, R, i, rd, rc);
    const double got = out.get(i);
    if (!close_enough(c.dtype, got, want)) {
      std::ostringstream s;
      s << describe(c) << ": element " << i << " is " << got << ", expected " << want;
      return s.str();
    }
  }
  return {};
}

// send/recv around a ring; even ranks send first so blocking sends cannot
// deadlock.
std::string run_p2p(Context& ctx, Communicator& comm, hal_dtype_t dt, uint64_t count) {
  const uint32_t W = ctx.world(), R = ctx.rank();
  const uint64_t es = hal::dtype_size(dt);
  const uint32_t next = (R + 1) % W, prev = (R + W - 1) % W;
  HostArray in(dt, count);
  for (uint64_t i = 0; i < count; ++i) in.set(i, input_value(dt, false, HAL_REDUCE_SUM, R, i));
  auto plugin = ctx.plugin();
  Buffer s(plugin, 0, count * es), r(plugin, 0, count * es);
  s.copy_from_host(in.data(), count * es);
  hal_coll_args_t sa{}, ra{};
  sa.struct_size = ra.struct_size = sizeof(sa);
  sa.op = HAL_COLL_SEND;
  ra.op = HAL_COLL_RECV;
  sa.dtype = ra.dtype = dt;
  sa.count = ra.count = count;
  sa.peer = next;
  ra.peer = prev;
  sa.sendbuf = s.data();
  ra.recvbuf = r.data();
  std::vector<hal::Request> reqs;
  if (R % 2 == 0) {
    reqs.push_back(comm.post(sa));
    reqs.push_back(comm.post(ra));
  } else {
    reqs.push_back(comm.post(ra));
    reqs.push_back(comm.post(sa));
  }
  for (auto& q : reqs)
    if (!q.wait(ctx.opts().op_timeout)) return "send/recv not finished after the op timeout";
  HostArray out(dt, count);
  r.copy_to_host(out.data(), count * es);
  for (uint64_t i = 0; i < count; ++i) {
    const double want = input_value(dt, false, HAL_REDUCE_SUM, prev, i);
    if (out.get(i) != want) {
      return "send/recv " + hal::dtype_name(dt) + " count " + std::to_string(count) + ": element " +
             std::to_string(i) + " wrong";
    }
  }
  return {};
}

void need_comm(Context& ctx) {
  if (!ctx.has_device()) throw Skip{"no device"};
  if (!ctx.comm_ok) throw Skip{ctx.comm_skip_reason};
}

// The cases of one op and dtype: every count, in place and not (where the
// op allows it), every reduction or root.
std::vector<Case> matrix_cases(Context& ctx, hal_coll_op_t op, hal_dtype_t dt,
                               const std::vector<uint64_t>& counts) {
  std::vector<Case> cases;
  const bool no_in_place = op == HAL_COLL_ALL_TO_ALL || op == HAL_COLL_ALL_TO_ALLV;
  for (uint64_t count : counts) {
    for (int ip = 0; ip < (no_in_place ? 1 : 2); ++ip) {
      if (is_reducing(op)) {
        for (hal_reduce_op_t r = 0; r < HAL_REDUCE_COUNT_V1; ++r)
          cases.push_back({op, dt, r, count, ip == 1, 0});
      } else if (op == HAL_COLL_BROADCAST) {
        for (uint32_t root = 0; root < std::min<uint32_t>(ctx.world(), 4); ++root)
          cases.push_back({op, dt, HAL_REDUCE_SUM, count, ip == 1, root});
      } else {
        cases.push_back({op, dt, HAL_REDUCE_SUM, count, ip == 1, 0});
      }
    }
    if (op == HAL_COLL_BARRIER) break;
  }
  return cases;
}

void check_matrix(Context& ctx, Communicator& comm, hal_coll_op_t op, hal_dtype_t dt,
                  const std::vector<uint64_t>& counts) {
  const std::vector<Case> cases = matrix_cases(ctx, op, dt, counts);
  std::string first_error;
  size_t failed = 0;
  for (const auto& c : cases) {
    std::string e = run_case(ctx, comm, c);
    if (!e.empty() && failed++ == 0) first_error = e;
  }
  expect(failed == 0, std::to_string(failed) + " of " + std::to_string(cases.size()) +
                          " cases wrong; first: " + first_error);
}

void check_create(Context& ctx, std::unique_ptr<bootstrap::HalBootstrap>& bs,
                  std::unique_ptr<Communicator>& comm) {
  if (!ctx.has_device()) throw Skip{"no device"};
  const hal_coll_api_t& c = ctx.plugin()->coll_api();
  hal_comm_create_args_t bad{};
  bad.struct_size = sizeof(bad);
  bad.rank = ctx.world();
  bad.world_size = ctx.world();
  hal_comm_t h = nullptr;
  expect_status(c.comm_create(&bad, &h), HAL_ERR_INVALID_ARGUMENT, "comm_create(rank == world)");
  bad.rank = 0;
  bad.struct_size = HAL_COMM_CREATE_ARGS_V1_0_SIZE - 8;
  expect_status(c.comm_create(&bad, &h), HAL_ERR_INVALID_ARGUMENT, "comm_create(struct_size too small)");
  bs = ctx.next_bootstrap();
  try {
    comm = ctx.make_comm(*bs);
  } catch (const Error& e) {
    if (e.code() == Code::not_supported && ctx.world() > 1 &&
        !(ctx.plugin()->api().capabilities & HAL_CAP_MULTI_RANK)) {
      ctx.comm_skip_reason = "the plugin supports world size 1 only (no HAL_CAP_MULTI_RANK)";
      throw Skip{ctx.comm_skip_reason};
    }
    throw;
  }
  ctx.comm_ok = true;
  hal_status_t err = comm->async_error();
  expect_status(err, HAL_OK, "comm_get_async_error on a fresh comm");
  // The host keeps to hal.h's key rule; so must the plugin.
  expect(bs->refused_keys() == 0, std::to_string(bs->refused_keys()) +
                                      " bootstrap call(s) with a key outside hal.h's rule (1 to " +
                                      std::to_string(HAL_BOOTSTRAP_MAX_KEY_BYTES) + " bytes, no NUL)");
}

void check_send_recv(Context& ctx, Communicator& comm, const std::vector<uint64_t>& counts) {
  if (ctx.world() < 2) throw Skip{"needs 2 ranks"};
  for (hal_dtype_t dt = 0; dt < HAL_DTYPE_COUNT_V1; ++dt)
    for (uint64_t count : counts) {
      std::string e = run_p2p(ctx, comm, dt, count);
      expect(e.empty(), e);
    }
}

void check_args_size(Context& ctx, Communicator& comm) {
  struct {
    hal_coll_args_t a;
    unsigned char tail[64];
  } big{};
  Buffer b(ctx.plugin(), 0, 64 * 4);
  std::vector<float> host(64, 1.0f);
  b.copy_from_host(host.data(), 256);
  big.a = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 64, true, 0});
  big.a.struct_size = sizeof(big);
  big.a.sendbuf = big.a.recvbuf = b.data();
  auto req = comm.post(big.a);
  expect(req.wait(ctx.opts().op_timeout), "all_reduce with a larger struct_size did not finish");
  b.copy_to_host(host.data(), 256);
  expect(host[5] == static_cast<float>(ctx.world()), "all_reduce with a larger struct_size gave a wrong sum");
  hal_coll_args_t small = big.a;
  small.struct_size = HAL_COLL_ARGS_V1_0_SIZE - 8;
  hal_request_t r = nullptr;
  expect_status(ctx.plugin()->coll_api().post(comm.handle(), &small, nullptr, &r), HAL_ERR_INVALID_ARGUMENT,
                "post(struct_size smaller than 1.0)");
}

void check_invalid_args(Context& ctx, Communicator& comm) {
  const hal_coll_api_t& c = ctx.plugin()->coll_api();
  Buffer b(ctx.plugin(), 0, 4096);
  auto bad = [&](hal_coll_args_t a, const std::string& what) {
    hal_request_t r = nullptr;
    expect_status(c.post(comm.handle(), &a, nullptr, &r), HAL_ERR_INVALID_ARGUMENT, "post(" + what + ")");
  };
  hal_coll_args_t a = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 4, false, 0});
  a.sendbuf = b.data();
  a.recvbuf = static_cast<char*>(b.data()) + 1024;
  hal_coll_args_t x = a;
  x.op = 99;
  bad(x, "op 99");
  x = a;
  x.dtype = 99;
  bad(x, "dtype 99");
  x = a;
  x.reduce_op = 99;
  bad(x, "reduce op 99");
  x = a;
  x.sendbuf = nullptr;
  bad(x, "sendbuf NULL, count 4");
  x = a;
  x.op = HAL_COLL_BROADCAST;
  x.root = ctx.world();
  bad(x, "broadcast root == world");
  x = a;
  x.op = HAL_COLL_ALL_TO_ALL;
  x.count = 1;
  x.recvbuf = b.data();
  bad(x, "all_to_all in place");
  x = a;
  x.op = HAL_COLL_SEND;
  x.peer = ctx.world();
  bad(x, "send to peer == world");
}

void check_pipelined(Context& ctx, Communicator& comm) {
  constexpr int kOps = 16;
  std::vector<Buffer> bufs;
  std::vector<hal::Request> reqs;
  for (int k = 0; k < kOps; ++k) {
    bufs.emplace_back(ctx.plugin(), 0, 1000 * 4);
    std::vector<float> host(1000, static_cast<float>(k + 1));
    bufs.back().copy_from_host(host.data(), 4000);
  }
  for (int k = 0; k < kOps; ++k) {
    hal_coll_args_t a = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 1000, true, 0});
    a.sendbuf = a.recvbuf = bufs[k].data();
    reqs.push_back(comm.post(a));
  }
  for (int k = kOps - 1; k >= 0; --k)
    expect(reqs[k].wait(ctx.opts().op_timeout), "a pipelined op did not finish");
  for (int k = 0; k < kOps; ++k) {
    std::vector<float> host(1000);
    bufs[k].copy_to_host(host.data(), 4000);
    expect(host[999] == static_cast<float>((k + 1) * ctx.world()),
           "pipelined op " + std::to_string(k) + " wrong");
  }
}

// A device whose memory is host memory takes any host memory where device
// memory is taken: libsigma passes its own buffers (a hand-off lands in the
// trainer's tensors, the MoE dispatcher's counts are on the host). A
// broadcast into and an all-reduce over plain host vectors, at odd offsets.
void check_host_memory(Context& ctx, Communicator& comm) {
  if (!ctx.plugin()->host_addressable(0)) throw Skip{"device 0's memory is not host memory"};
  std::vector<uint8_t> bytes(4099, 0);
  uint8_t* at = bytes.data() + 3;
  if (ctx.rank() == 0)
    for (size_t i = 0; i < 4093; ++i) at[i] = static_cast<uint8_t>(i * 7 + 1);
  hal_coll_args_t b = base_args({HAL_COLL_BROADCAST, HAL_DTYPE_U8, HAL_REDUCE_SUM, 4093, true, 0});
  b.sendbuf = b.recvbuf = at;
  expect(comm.post(b).wait(ctx.opts().op_timeout), "a broadcast into host memory did not finish");
  for (size_t i = 0; i < 4093; ++i)
    expect(at[i] == static_cast<uint8_t>(i * 7 + 1), "a broadcast into host memory gave a wrong byte");
  expect(bytes[0] == 0 && bytes[4098] == 0, "a broadcast into host memory wrote outside its range");
  std::vector<float> sum(1001, 1.0f);
  hal_coll_args_t r = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 1000, true, 0});
  r.sendbuf = r.recvbuf = sum.data() + 1;
  expect(comm.post(r).wait(ctx.opts().op_timeout), "an all-reduce over host memory did not finish");
  expect(sum[1000] == static_cast<float>(ctx.world()) && sum[0] == 1.0f,
         "an all-reduce over host memory gave a wrong sum");
}

// The blocking run of ABI 1.1: every op through it, and its place in the
// posting order (a run waits for what was posted before it).
void check_run(Context& ctx, Communicator& comm) {
  if (ctx.plugin()->coll_run() == nullptr) throw Skip{"the plugin has no hal_coll_api_t.run (optional)"};
  std::string first_error;
  size_t failed = 0, cases = 0;
  const hal_coll_op_t run_ops[] = {HAL_COLL_ALL_REDUCE, HAL_COLL_ALL_GATHER,  HAL_COLL_REDUCE_SCATTER,
                                   HAL_COLL_ALL_TO_ALL, HAL_COLL_ALL_TO_ALLV, HAL_COLL_BROADCAST,
                                   HAL_COLL_BARRIER};
  for (hal_coll_op_t op : run_ops)
    for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_I64})
      for (uint64_t count : {uint64_t{0}, uint64_t{7}, ctx.opts().large_count}) {
        const bool in_place = op != HAL_COLL_ALL_TO_ALL && op != HAL_COLL_ALL_TO_ALLV && count == 7;
        ++cases;
        std::string e = run_case(ctx, comm, {op, dt, HAL_REDUCE_SUM, count, in_place, ctx.world() - 1}, true);
        if (!e.empty() && failed++ == 0) first_error = e;
      }
  expect(failed == 0,
         std::to_string(failed) + " of " + std::to_string(cases) + " cases wrong; first: " + first_error);
  if (ctx.world() >= 2) {
    std::string e = run_p2p(ctx, comm, HAL_DTYPE_F32, 1000);
    expect(e.empty(), e);
  }
  // Posted ops, then a run that adds to the last posted buffer: if it ran
  // before them it would read the buffer before the all-reduce wrote it.
  constexpr int kOps = 4;
  constexpr uint64_t kCount = 1000;
  std::vector<Buffer> bufs;
  std::vector<hal::Request> reqs;
  for (int k = 0; k < kOps; ++k) {
    bufs.emplace_back(ctx.plugin(), 0, kCount * 4);
    std::vector<float> host(kCount, static_cast<float>(k + 1));
    bufs.back().copy_from_host(host.data(), kCount * 4);
    hal_coll_args_t a = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, kCount, true, 0});
    a.sendbuf = a.recvbuf = bufs.back().data();
    reqs.push_back(comm.post(a));
  }
  hal_coll_args_t a = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, kCount, true, 0});
  a.sendbuf = a.recvbuf = bufs.back().data();
  const hal_status_t st = ctx.plugin()->coll_run()(comm.handle(), &a, nullptr, ns(ctx.opts().op_timeout));
  expect_status(st, HAL_OK, "run after posted ops");
  for (auto& r : reqs) expect(r.test(), "a posted op had not finished when a later run returned");
  std::vector<float> host(kCount);
  bufs.back().copy_to_host(host.data(), kCount * 4);
  const float want = static_cast<float>(kOps) * ctx.world() * ctx.world();
  expect(host[kCount - 1] == want, "run after posted ops gave " + std::to_string(host[kCount - 1]) +
                                       ", expected " + std::to_string(want) + " (out of order?)");
  a.struct_size = HAL_COLL_ARGS_V1_0_SIZE - 8;
  expect_status(ctx.plugin()->coll_run()(comm.handle(), &a, nullptr, 1'000'000'000), HAL_ERR_INVALID_ARGUMENT,
                "run(struct_size smaller than 1.0)");
}

void check_timeout_abort(Context& ctx) {
  need_comm(ctx);
  const hal_ext_fault_injection_t* fi = ctx.plugin()->fault_injection();
  const bool can_hang = fi && (fi->supported_kinds & (1u << HAL_FAULT_HANG));
  if (ctx.world() == 1 && !can_hang) throw Skip{"needs 2 ranks (a hung peer) or the HANG fault"};
  auto hbs = ctx.next_bootstrap();
  auto hc = ctx.make_comm(*hbs);
  const hal_coll_api_t& c = ctx.plugin()->coll_api();
  // Rank 0 posts an all-reduce that no other rank joins (they play the
  // hung peers); alone, the HANG fault makes it hang. Only rank 0 aborts
  // while waiting, so what it sees is its own abort, not a peer's.
  const bool hung_peer = ctx.rank() != 0;
  if (ctx.world() == 1) {
    hal_fault_spec_t spec{};
    spec.struct_size = sizeof(spec);
    spec.kind = HAL_FAULT_HANG;
    ctx.plugin()->check(fi->inject(&spec), "inject(HANG)");
  }
  std::string failure;
  if (!hung_peer) {
    Buffer b(ctx.plugin(), 0, 4096);
    hal_coll_args_t a = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 1024, true, 0});
    a.sendbuf = a.recvbuf = b.data();
    hal_request_t r = nullptr;
    ctx.plugin()->check(c.post(hc->handle(), &a, nullptr, &r), "hal_coll_api_t.post");
    hal_status_t st = c.wait(r, 200'000'000);
    if (st != HAL_ERR_TIMEOUT)
      failure = "wait(200 ms) on a hung op returned " + hal_status_name(st) + ", expected TIMEOUT";
    if (failure.empty() && c.test(r) != HAL_IN_PROGRESS) failure = "test() on a hung op is not IN_PROGRESS";
    if (failure.empty() && c.request_free(r) != HAL_ERR_INVALID_ARGUMENT)
      failure = "request_free on a running op of a live comm must be refused";
    // Abort from another thread while this one is blocked in wait.
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.comm_abort(hc->handle());
    });
    const auto t0 = std::chrono::steady_clock::now();
    st = c.wait(r, 30'000'000'000ull);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    aborter.join();
    if (failure.empty() && st != HAL_ERR_ABORTED)
      failure = "wait during comm_abort returned " + hal_status_name(st) + ", expected ABORTED";
    if (failure.empty() && s > 5.0) failure = "comm_abort took " + std::to_string(s) + " s to unblock wait";
    hal_status_t ae = HAL_OK;
    c.comm_get_async_error(hc->handle(), &ae);
    if (failure.empty() && ae != HAL_ERR_ABORTED)
      failure = "async error after abort is " + hal_status_name(ae) + ", expected ABORTED";
    hal_request_t r2 = nullptr;
    st = c.post(hc->handle(), &a, nullptr, &r2);
    if (failure.empty() && st != HAL_ERR_ABORTED)
      failure = "post after abort returned " + hal_status_name(st);
    if (st == HAL_OK) c.request_free(r2);
    st = c.request_free(r);
    if (failure.empty() && st != HAL_OK) failure = "request_free after abort returned " + hal_status_name(st);
  }
  ctx.store_barrier("timeout_abort_done");
  if (hung_peer) hc->abort();  // the peers give up too, as sigmarun would make them
  hc.reset();
  expect(failure.empty(), failure);
  if (ctx.world() == 1) ctx.plugin()->check(fi->clear(0), "clear");
}

// A run that nobody joins: TIMEOUT in about its time, the communicator
// aborted; and one ended by an abort from another thread.
void check_run_timeout_abort(Context& ctx) {
  need_comm(ctx);
  hal_coll_run_fn* run = ctx.plugin()->coll_run();
  if (run == nullptr) throw Skip{"the plugin has no hal_coll_api_t.run (optional)"};
  const hal_ext_fault_injection_t* fi = ctx.plugin()->fault_injection();
  const bool can_hang = fi && (fi->supported_kinds & (1u << HAL_FAULT_HANG));
  if (ctx.world() == 1 && !can_hang) throw Skip{"needs 2 ranks (a hung peer) or the HANG fault"};
  const hal_coll_api_t& c = ctx.plugin()->coll_api();
  std::string failure;
  for (int round = 0; round < 2; ++round) {
    const bool by_abort = round == 1;
    auto hbs = ctx.next_bootstrap();
    auto hc = ctx.make_comm(*hbs);
    if (ctx.world() == 1) {
      hal_fault_spec_t spec{};
      spec.struct_size = sizeof(spec);
      spec.kind = HAL_FAULT_HANG;
      ctx.plugin()->check(fi->inject(&spec), "inject(HANG)");
    }
    if (ctx.rank() == 0) {
      Buffer b(ctx.plugin(), 0, 4096);
      hal_coll_args_t a = base_args({HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 1024, true, 0});
      a.sendbuf = a.recvbuf = b.data();
      std::thread aborter([&] {
        if (!by_abort) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        c.comm_abort(hc->handle());
      });
      const uint64_t limit = by_abort ? 30'000'000'000ull : 200'000'000ull;
      const auto t0 = std::chrono::steady_clock::now();
      const hal_status_t st = run(hc->handle(), &a, nullptr, limit);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      aborter.join();
      const hal_status_t want_st = by_abort ? HAL_ERR_ABORTED : HAL_ERR_TIMEOUT;
      const std::string what = by_abort ? "run during comm_abort" : "run(200 ms) of a hung op";
      if (failure.empty() && st != want_st)
        failure = what + " returned " + hal_status_name(st) + ", expected " + hal_status_name(want_st);
      if (failure.empty() && s > (by_abort ? 5.0 : 2.0))
        failure = what + " returned after " + std::to_string(s) + " s";
      hal_status_t ae = HAL_OK;
      c.comm_get_async_error(hc->handle(), &ae);
      if (failure.empty() && ae != want_st)
        failure = "async error after " + what + " is " + hal_status_name(ae) + ", expected " +
                  hal_status_name(want_st);
      hal_request_t r = nullptr;
      const hal_status_t pst = c.post(hc->handle(), &a, nullptr, &r);
      if (failure.empty() && pst != HAL_ERR_ABORTED && pst != HAL_ERR_TIMEOUT)
        failure =
            "post after " + what + " returned " + hal_status_name(pst) + ": the communicator was not aborted";
      if (pst == HAL_OK) c.request_free(r);
    }
    ctx.store_barrier(by_abort ? "run_abort_done" : "run_timeout_done");
    if (ctx.rank() != 0) hc->abort();
    hc.reset();
    if (ctx.world() == 1) ctx.plugin()->check(fi->clear(0), "clear");
  }
  expect(failure.empty(), failure);
}

// Creation with a peer that never comes (a world one larger than the
// suite's) ends soon after the host cancels the bootstrap, as sigmarun
// does when it aborts a recovery round: hal.h's store_uri note. Every
// rank waits for the missing one; another thread cancels after 300 ms.
void check_create_cancel(Context& ctx) {
  if (!ctx.has_device()) throw Skip{"no device"};
  if (!(ctx.plugin()->api().capabilities & HAL_CAP_MULTI_RANK)) throw Skip{"no HAL_CAP_MULTI_RANK"};
  auto bs = ctx.next_bootstrap();
  hal_comm_create_args_t args{};
  args.struct_size = sizeof(args);
  args.rank = ctx.rank();
  args.world_size = ctx.world() + 1;
  args.bootstrap = bs->table();
  args.timeout_ns = 60'000'000'000ull;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    bs->cancel();
  });
  hal_comm_t h = nullptr;
  const hal_status_t st = ctx.plugin()->coll_api().comm_create(&args, &h);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  canceller.join();
  if (st == HAL_OK) ctx.plugin()->coll_api().comm_destroy(h);
  ctx.store_barrier("create_cancel_done");
  expect(st != HAL_OK, "comm_create with a rank missing returned OK");
  expect(s < 5.0, "comm_create went on " + std::to_string(s - 0.3) +
                      " s after the host cancelled its bootstrap (" + hal_status_name(st) + ")");
}

void check_new_comm_after_abort(Context& ctx) {
  need_comm(ctx);
  auto nbs = ctx.next_bootstrap();
  auto nc = ctx.make_comm(*nbs);
  std::string e = run_case(ctx, *nc, {HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 1000, false, 0});
  expect(e.empty(), e);
}

}  // namespace

void run_coll_checks(Context& ctx) {
  std::unique_ptr<bootstrap::HalBootstrap> bs;
  std::unique_ptr<Communicator> comm;
  ctx.comm_skip_reason = "no communicator could be created";

  ctx.run("coll.create", [&] { check_create(ctx, bs, comm); });

  const std::vector<uint64_t> counts = {0, 1, 7, ctx.opts().large_count};
  const hal_coll_op_t ops[] = {HAL_COLL_ALL_REDUCE, HAL_COLL_ALL_GATHER,  HAL_COLL_REDUCE_SCATTER,
                               HAL_COLL_ALL_TO_ALL, HAL_COLL_ALL_TO_ALLV, HAL_COLL_BROADCAST,
                               HAL_COLL_BARRIER};
  for (hal_coll_op_t op : ops) {
    for (hal_dtype_t dt = 0; dt < HAL_DTYPE_COUNT_V1; ++dt) {
      if (op == HAL_COLL_BARRIER && dt > 0) break;
      const std::string name =
          "coll.matrix." + hal::coll_op_name(op) + (op == HAL_COLL_BARRIER ? "" : "." + hal::dtype_name(dt));
      ctx.run(name, [&] {
        need_comm(ctx);
        check_matrix(ctx, *comm, op, dt, counts);
      });
    }
  }

  ctx.run("coll.send_recv", [&] {
    need_comm(ctx);
    check_send_recv(ctx, *comm, counts);
  });

  ctx.run("coll.args_size", [&] {
    need_comm(ctx);
    check_args_size(ctx, *comm);
  });

  ctx.run("coll.invalid_args", [&] {
    need_comm(ctx);
    check_invalid_args(ctx, *comm);
  });

  ctx.run("coll.pipelined", [&] {
    need_comm(ctx);
    check_pipelined(ctx, *comm);
  });

  ctx.run("coll.host_memory", [&] {
    need_comm(ctx);
    check_host_memory(ctx, *comm);
  });

  ctx.run("coll.run", [&] {
    need_comm(ctx);
    check_run(ctx, *comm);
  });

  // Drop the shared communicator before the abort tests make their own.
  comm.reset();
  bs.reset();

  ctx.run("coll.timeout_abort", [&] { check_timeout_abort(ctx); });

  ctx.run("coll.run_timeout_abort", [&] { check_run_timeout_abort(ctx); });

  ctx.run("coll.new_comm_after_abort", [&] { check_new_comm_after_abort(ctx); });

  ctx.run("coll.create_cancel", [&] { check_create_cancel(ctx); });
}

}  // namespace sigma::conformance
