// Collectives on NCCL. The unique id travels through the host's bootstrap
// callbacks (rank 0 sets it, the others wait for it). Communicators are
// non-blocking (ncclConfig_t.blocking = 0) so that creation can time out and
// comm_abort (ncclCommAbort) can unblock a hung collective. Each operation
// is enqueued on the given stream (or the communicator's own) and completes
// when an event recorded after it does; NCCL's asynchronous error turns a
// dead peer into REMOTE_ERROR instead of a hang.
#include "cuda.hpp"

#include <nccl.h>

#include <mutex>
#include <set>
#include <thread>
#include <vector>

struct hal_comm_s {
  ncclComm_t nccl = nullptr;
  uint32_t device = 0, rank = 0, world = 0;
  cudaStream_t stream = nullptr;  // used when a post gives no stream
  void* scratch = nullptr;        // one float for BARRIER
  bool aborted = false;           // guarded by cuda_vendor::g_mu
};

struct hal_request_s {
  hal_comm_s* comm;  // nullptr once the comm was destroyed
  cudaEvent_t done = nullptr;
  uint32_t device = 0;
};

namespace cuda_vendor {
namespace {

std::mutex g_mu;  // guards g_comms, g_requests and hal_comm_s::aborted
std::set<hal_comm_s*> g_comms;
std::set<hal_request_s*> g_requests;

hal_status_t nccl_fail(ncclResult_t r, const std::string& what, hal_comm_s* c = nullptr) {
  hal_status_t st = HAL_ERR_INTERNAL;
  if (r == ncclInvalidArgument || r == ncclInvalidUsage)
    st = HAL_ERR_INVALID_ARGUMENT;
  else if (r == ncclRemoteError || r == ncclSystemError)
    st = HAL_ERR_REMOTE_ERROR;
  std::string msg = "cuda: " + what + ": " + ncclGetErrorString(r);
  if (c != nullptr) {
    if (const char* last = ncclGetLastError(c->nccl); last && *last) msg += std::string(" (") + last + ")";
  }
  return fail(st, msg);
}

// Waits while a non-blocking NCCL call is still in progress, at most timeout_ns.
ncclResult_t settle(ncclComm_t comm, uint64_t timeout_ns) {
  const uint64_t end = now_ns() + timeout_ns;
  ncclResult_t state = ncclInProgress;
  while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress) {
    if (now_ns() > end) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return state;
}

bool live(hal_comm_t c) {
  std::lock_guard lk(g_mu);
  return c != nullptr && g_comms.count(c) > 0;
}

bool aborted(hal_comm_t c) {
  std::lock_guard lk(g_mu);
  return c->aborted;
}

bool dtype_of(hal_dtype_t d, ncclDataType_t& out) {
  switch (d) {
    case HAL_DTYPE_F32:
      out = ncclFloat32;
      return true;
    case HAL_DTYPE_F16:
      out = ncclFloat16;
      return true;
    case HAL_DTYPE_BF16:
      out = ncclBfloat16;
      return true;
    case HAL_DTYPE_F64:
      out = ncclFloat64;
      return true;
    case HAL_DTYPE_I32:
      out = ncclInt32;
      return true;
    case HAL_DTYPE_I64:
      out = ncclInt64;
      return true;
    case HAL_DTYPE_U8:
      out = ncclUint8;
      return true;
    default:
      return false;
  }
}

bool op_of(hal_reduce_op_t o, ncclRedOp_t& out) {
  switch (o) {
    case HAL_REDUCE_SUM:
      out = ncclSum;
      return true;
    case HAL_REDUCE_PROD:
      out = ncclProd;
      return true;
    case HAL_REDUCE_MIN:
      out = ncclMin;
      return true;
    case HAL_REDUCE_MAX:
      out = ncclMax;
      return true;
    case HAL_REDUCE_AVG:
      out = ncclAvg;
      return true;
    default:
      return false;
  }
}

hal_status_t comm_create(const hal_comm_create_args_t* a, hal_comm_t* out) {
  if (a == nullptr || out == nullptr || a->struct_size < HAL_COMM_CREATE_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: comm args NULL or struct_size too small");
  if (a->world_size == 0 || a->rank >= a->world_size)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cuda: rank " + std::to_string(a->rank) + " of world " + std::to_string(a->world_size));
  if (a->world_size > 1 &&
      (a->bootstrap == nullptr || a->bootstrap->kv_set == nullptr || a->bootstrap->kv_get == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: a world of several ranks needs the bootstrap callbacks");
  if (hal_status_t st = use_device(a->device); st != HAL_OK) return st;
  ncclUniqueId id{};
  if (a->rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return nccl_fail(r, "ncclGetUniqueId");
    if (a->world_size > 1) {
      if (hal_status_t st = a->bootstrap->kv_set(a->bootstrap->ctx, "nccl_unique_id", &id, sizeof id);
          st != HAL_OK)
        return fail(st, "cuda: bootstrap kv_set(nccl_unique_id) failed with status " + std::to_string(st));
    }
  } else {
    uint64_t size = 0;
    const hal_status_t st =
        a->bootstrap->kv_get(a->bootstrap->ctx, "nccl_unique_id", &id, sizeof id, &size, a->timeout_ns);
    if (st != HAL_OK)
      return fail(st,
                  "cuda: waiting for rank 0's NCCL id through the bootstrap: status " + std::to_string(st));
    if (size != sizeof id)
      return fail(HAL_ERR_INVALID_ARGUMENT,
                  "cuda: the bootstrap's nccl_unique_id has " + std::to_string(size) + " bytes");
  }
  auto c = std::make_unique<hal_comm_s>();
  c->device = a->device;
  c->rank = a->rank;
  c->world = a->world_size;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c->nccl, static_cast<int>(a->world_size), id,
                                          static_cast<int>(a->rank), &config);
  if (r == ncclInProgress || r == ncclSuccess)
    r = settle(c->nccl, a->timeout_ns ? a->timeout_ns : 60'000'000'000ull);
  if (r == ncclInProgress) {
    ncclCommAbort(c->nccl);
    return fail(HAL_ERR_TIMEOUT, "cuda: ncclCommInitRankConfig: the other ranks did not arrive within " +
                                     std::to_string(a->timeout_ns / 1000000) + " ms");
  }
  if (r != ncclSuccess) {
    if (c->nccl) ncclCommAbort(c->nccl);
    return nccl_fail(r, "ncclCommInitRankConfig");
  }
  if (cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommAbort(c->nccl);
    return cuda_fail(e, "cudaStreamCreateWithFlags");
  }
  if (cudaError_t e = cudaMalloc(&c->scratch, 4); e != cudaSuccess) {
    ncclCommAbort(c->nccl);
    cudaStreamDestroy(c->stream);
    return cuda_fail(e, "cudaMalloc (barrier scratch)");
  }
  std::lock_guard lk(g_mu);
  *out = c.release();
  g_comms.insert(*out);
  return HAL_OK;
}

void release(hal_comm_s* c, bool abort) {
  cudaSetDevice(static_cast<int>(c->device));
  if (c->nccl) {
    if (abort) {
      ncclCommAbort(c->nccl);
    } else {
      // A clean goodbye, bounded: a peer that is gone turns it into an abort.
      ncclResult_t r = ncclCommFinalize(c->nccl);
      if (r == ncclInProgress || r == ncclSuccess) r = settle(c->nccl, 10'000'000'000ull);
      if (r == ncclSuccess)
        ncclCommDestroy(c->nccl);
      else
        ncclCommAbort(c->nccl);
    }
  }
  cudaStreamSynchronize(c->stream);
  cudaStreamDestroy(c->stream);
  cudaFree(c->scratch);
  delete c;
}

hal_status_t comm_destroy(hal_comm_t comm) {
  bool was_aborted;
  {
    std::lock_guard lk(g_mu);
    if (comm == nullptr || g_comms.erase(comm) == 0)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown comm");
    for (auto* r : g_requests)
      if (r->comm == comm) r->comm = nullptr;
    was_aborted = comm->aborted;
  }
  if (was_aborted) comm->nccl = nullptr;  // ncclCommAbort already freed it
  release(comm, /*abort=*/false);
  return HAL_OK;
}

hal_status_t comm_abort(hal_comm_t comm) {
  {
    std::lock_guard lk(g_mu);
    if (comm == nullptr || g_comms.count(comm) == 0)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown comm");
    if (comm->aborted) return HAL_OK;
    comm->aborted = true;
    // Under the lock, so that no test() reads the communicator while NCCL
    // frees it. The abort unblocks kernels waiting on peers.
    cudaSetDevice(static_cast<int>(comm->device));
    ncclCommAbort(comm->nccl);
  }
  return HAL_OK;
}

hal_status_t async_error(hal_comm_t comm, hal_status_t* error) {
  if (error == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: error is NULL");
  ncclResult_t state = ncclSuccess;
  {
    std::lock_guard lk(g_mu);
    if (comm == nullptr || g_comms.count(comm) == 0)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown comm");
    if (comm->aborted) {
      *error = HAL_ERR_ABORTED;
      return HAL_OK;
    }
    ncclCommGetAsyncError(comm->nccl, &state);
  }
  *error = state == ncclSuccess || state == ncclInProgress        ? HAL_OK
           : state == ncclRemoteError || state == ncclSystemError ? HAL_ERR_REMOTE_ERROR
                                                                  : HAL_ERR_INTERNAL;
  return HAL_OK;
}

// Enqueues one collective; grouped calls for the all-to-alls.
ncclResult_t enqueue(hal_comm_s* c, const hal_coll_args_t& a, ncclDataType_t dt, ncclRedOp_t op,
                     cudaStream_t s) {
  const size_t es = hal_dtype_size(a.dtype);
  const auto* send = static_cast<const char*>(a.sendbuf);
  auto* recv = static_cast<char*>(a.recvbuf);
  const bool reducing = a.op == HAL_COLL_ALL_REDUCE || a.op == HAL_COLL_REDUCE_SCATTER;
  if (c->world == 1 && reducing) {
    // Every reduction of one contribution is that contribution: a copy, or
    // nothing in place. NCCL 2.28.9's own one-rank path leaves the last
    // count % 4 elements of an out-of-place average unwritten (seen on an
    // H200; docs/vendors.md).
    if (a.count == 0 || send == recv) return ncclSuccess;
    return cudaMemcpyAsync(recv, send, a.count * es, cudaMemcpyDeviceToDevice, s) == cudaSuccess
               ? ncclSuccess
               : ncclUnhandledCudaError;
  }
  switch (a.op) {
    case HAL_COLL_ALL_REDUCE:
      return ncclAllReduce(send, recv, a.count, dt, op, c->nccl, s);
    case HAL_COLL_ALL_GATHER:
      return ncclAllGather(send, recv, a.count, dt, c->nccl, s);
    case HAL_COLL_REDUCE_SCATTER:
      return ncclReduceScatter(send, recv, a.count, dt, op, c->nccl, s);
    case HAL_COLL_BROADCAST:
      return ncclBroadcast(send, recv, a.count, dt, static_cast<int>(a.root), c->nccl, s);
    case HAL_COLL_BARRIER:
      return ncclAllReduce(c->scratch, c->scratch, 1, ncclFloat32, ncclSum, c->nccl, s);
    case HAL_COLL_SEND:
      return ncclSend(send, a.count, dt, static_cast<int>(a.peer), c->nccl, s);
    case HAL_COLL_RECV:
      return ncclRecv(recv, a.count, dt, static_cast<int>(a.peer), c->nccl, s);
    case HAL_COLL_ALL_TO_ALL:
    case HAL_COLL_ALL_TO_ALLV: {
      const bool v = a.op == HAL_COLL_ALL_TO_ALLV;
      ncclResult_t r = ncclGroupStart();
      for (uint32_t p = 0; r == ncclSuccess && p < c->world; ++p) {
        const uint64_t sc = v ? a.send_counts[p] : a.count, sd = v ? a.send_displs[p] : p * a.count;
        const uint64_t rc = v ? a.recv_counts[p] : a.count, rd = v ? a.recv_displs[p] : p * a.count;
        if (sc) r = ncclSend(send + sd * es, sc, dt, static_cast<int>(p), c->nccl, s);
        if (r == ncclSuccess && rc) r = ncclRecv(recv + rd * es, rc, dt, static_cast<int>(p), c->nccl, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    }
    default:
      return ncclInvalidArgument;
  }
}

// A NULL buffer where the op reads or writes elements: NCCL would fault on
// it and leave the communicator unusable, so it is refused here.
hal_status_t check_buffers(const hal_coll_args_t& a, uint32_t world) {
  if (a.op == HAL_COLL_BARRIER) return HAL_OK;
  uint64_t sent = a.count, received = a.count;
  if (a.op == HAL_COLL_ALL_TO_ALLV) {
    if (!a.send_counts || !a.send_displs || !a.recv_counts || !a.recv_displs)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: all-to-allv needs its four count/displacement arrays");
    sent = received = 0;
    for (uint32_t p = 0; p < world; ++p) {
      sent += a.send_counts[p];
      received += a.recv_counts[p];
    }
  }
  if (a.op == HAL_COLL_RECV) sent = 0;
  if (a.op == HAL_COLL_SEND) received = 0;
  if ((sent > 0 && a.sendbuf == nullptr) || (received > 0 && a.recvbuf == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: NULL buffer with count " + std::to_string(a.count));
  return HAL_OK;
}

hal_status_t post(hal_comm_t comm, const hal_coll_args_t* a, hal_stream_t stream, hal_request_t* out) {
  if (a == nullptr || out == nullptr || a->struct_size < HAL_COLL_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: args/request NULL or struct_size too small");
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown comm");
  if (aborted(comm)) return fail(HAL_ERR_ABORTED, "cuda: the communicator was aborted");
  if (a->op >= HAL_COLL_OP_COUNT_V1)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown op " + std::to_string(a->op));
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  if (a->op != HAL_COLL_BARRIER && !dtype_of(a->dtype, dt))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown dtype " + std::to_string(a->dtype));
  const bool reducing = a->op == HAL_COLL_ALL_REDUCE || a->op == HAL_COLL_REDUCE_SCATTER;
  if (reducing && !op_of(a->reduce_op, op))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown reduction " + std::to_string(a->reduce_op));
  if ((a->op == HAL_COLL_SEND || a->op == HAL_COLL_RECV) && a->peer >= comm->world)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cuda: peer " + std::to_string(a->peer) + " of world " + std::to_string(comm->world));
  if (a->op == HAL_COLL_BROADCAST && a->root >= comm->world)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cuda: root " + std::to_string(a->root) + " of world " + std::to_string(comm->world));
  if (hal_status_t st = check_buffers(*a, comm->world); st != HAL_OK) return st;
  if ((a->op == HAL_COLL_ALL_TO_ALL || a->op == HAL_COLL_ALL_TO_ALLV) && a->sendbuf == a->recvbuf &&
      a->sendbuf)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: all-to-all may not run in place");
  if (hal_status_t st = use_device(comm->device); st != HAL_OK) return st;
  cudaStream_t s = stream ? stream->stream : comm->stream;
  ncclResult_t r = enqueue(comm, *a, dt, op, s);
  if (r == ncclInProgress) r = settle(comm->nccl, 60'000'000'000ull);
  if (r != ncclSuccess) return nccl_fail(r, "enqueue", comm);
  auto req = std::make_unique<hal_request_s>();
  req->comm = comm;
  req->device = comm->device;
  if (cudaError_t e = cudaEventCreateWithFlags(&req->done, cudaEventDisableTiming); e != cudaSuccess)
    return cuda_fail(e, "cudaEventCreateWithFlags");
  if (cudaError_t e = cudaEventRecord(req->done, s); e != cudaSuccess) {
    cudaEventDestroy(req->done);
    return cuda_fail(e, "cudaEventRecord");
  }
  std::lock_guard lk(g_mu);
  *out = req.release();
  g_requests.insert(*out);
  return HAL_OK;
}

hal_status_t test(hal_request_t r) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: request is NULL");
  ncclResult_t state = ncclSuccess;
  cudaError_t e;
  {
    std::lock_guard lk(g_mu);
    if (g_requests.count(r) == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown request");
    hal_comm_s* c = r->comm;
    if (c != nullptr && c->aborted) return fail(HAL_ERR_ABORTED, "cuda: the communicator was aborted");
    cudaSetDevice(static_cast<int>(r->device));
    e = cudaEventQuery(r->done);
    if (e == cudaErrorNotReady && c != nullptr) {
      ncclCommGetAsyncError(c->nccl, &state);
      if (state != ncclSuccess && state != ncclInProgress) return nccl_fail(state, "collective failed", c);
    }
  }
  if (e == cudaSuccess) return HAL_OK;
  if (e != cudaErrorNotReady) return cuda_fail(e, "cudaEventQuery");
  return HAL_IN_PROGRESS;
}

hal_status_t wait(hal_request_t r, uint64_t timeout_ns) {
  const uint64_t end = timeout_ns >= (uint64_t{1} << 62) ? UINT64_MAX : now_ns() + timeout_ns;
  for (;;) {
    const hal_status_t st = test(r);
    if (st != HAL_IN_PROGRESS) return st;
    if (timeout_ns == 0) return HAL_IN_PROGRESS;
    if (now_ns() >= end)
      return fail(HAL_ERR_TIMEOUT,
                  "cuda: operation still running after " + std::to_string(timeout_ns) + " ns");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

hal_status_t request_free(hal_request_t r) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: request is NULL");
  {
    std::lock_guard lk(g_mu);
    if (g_requests.count(r) == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown request");
    const bool comm_ok = r->comm != nullptr && !r->comm->aborted;
    cudaSetDevice(static_cast<int>(r->device));
    if (comm_ok && cudaEventQuery(r->done) == cudaErrorNotReady)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: request still running; abort its comm first");
    g_requests.erase(r);
  }
  cudaGetLastError();
  cudaEventDestroy(r->done);
  delete r;
  return HAL_OK;
}

}  // namespace

void destroy_all_comms() {
  std::set<hal_comm_s*> comms;
  std::set<hal_request_s*> reqs;
  {
    std::lock_guard lk(g_mu);
    comms.swap(g_comms);
    reqs.swap(g_requests);
  }
  for (auto* c : comms) {
    if (c->aborted) c->nccl = nullptr;
    release(c, /*abort=*/true);  // finalize of the plugin: nothing may block
  }
  for (auto* r : reqs) {
    cudaEventDestroy(r->done);
    delete r;
  }
}

const hal_coll_api_t k_coll = {
    .struct_size = sizeof(hal_coll_api_t),
    .comm_create = comm_create,
    .comm_destroy = comm_destroy,
    .comm_abort = comm_abort,
    .comm_get_async_error = async_error,
    .post = post,
    .test = test,
    .wait = wait,
    .request_free = request_free,
    .run = nullptr,  // NCCL is asynchronous: the host posts and waits
};

}  // namespace cuda_vendor
