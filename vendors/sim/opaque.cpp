#include "opaque.hpp"

#include "sim.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace sim_vendor::opaque {
namespace {

struct Mapping {
  uint8_t* priv;
  uint64_t size;   // what the host asked for
  uint64_t bytes;  // mapped (whole pages)
};

std::atomic<bool> g_enabled{false}, g_kernels{true};
std::mutex g_mu;
std::map<const uint8_t*, Mapping> g_maps;  // by handle (the PROT_NONE address)

}  // namespace

void set_enabled(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }
void set_kernels(bool on) { g_kernels = on; }
bool kernels() { return g_kernels; }

hal_status_t alloc(uint64_t size, uint64_t alignment, void** handle) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (alignment > page)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: opaque memory aligns to pages (" + std::to_string(page) +
                                              " bytes), not " + std::to_string(alignment));
  const uint64_t bytes = (std::max<uint64_t>(size, 1) + page - 1) / page * page;
  const int fd = ::memfd_create("sim-device-memory", MFD_CLOEXEC);
  if (fd < 0) return fail(HAL_ERR_OUT_OF_MEMORY, std::string("sim: memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return fail(HAL_ERR_OUT_OF_MEMORY, std::string("sim: ftruncate: ") + std::strerror(errno));
  }
  void* priv = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* host = ::mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (priv == MAP_FAILED || host == MAP_FAILED) {
    if (priv != MAP_FAILED) ::munmap(priv, bytes);
    if (host != MAP_FAILED) ::munmap(host, bytes);
    return fail(HAL_ERR_OUT_OF_MEMORY, std::string("sim: mmap: ") + std::strerror(errno));
  }
  std::lock_guard lk(g_mu);
  g_maps[static_cast<uint8_t*>(host)] = {static_cast<uint8_t*>(priv), size, bytes};
  *handle = host;
  return HAL_OK;
}

hal_status_t release(void* handle) {
  Mapping m{};
  {
    std::lock_guard lk(g_mu);
    auto it = g_maps.find(static_cast<uint8_t*>(handle));
    if (it == g_maps.end())
      return fail(HAL_ERR_INVALID_ARGUMENT, "sim: free of an address mem_alloc did not return");
    m = it->second;
    g_maps.erase(it);
  }
  ::munmap(m.priv, m.bytes);
  ::munmap(handle, m.bytes);
  return HAL_OK;
}

void free_all() {
  std::lock_guard lk(g_mu);
  for (auto& [h, m] : g_maps) {
    ::munmap(m.priv, m.bytes);
    ::munmap(const_cast<uint8_t*>(h), m.bytes);
  }
  g_maps.clear();
}

void* to_private(const void* p, uint64_t bytes) {
  const auto* a = static_cast<const uint8_t*>(p);
  std::lock_guard lk(g_mu);
  auto it = g_maps.upper_bound(a);
  if (it == g_maps.begin()) return nullptr;
  --it;
  const uint64_t off = static_cast<uint64_t>(a - it->first);
  if (off > it->second.size || bytes > it->second.size - off) return nullptr;
  return it->second.priv + off;
}

hal_status_t copy(void* dst, const void* src, uint64_t size, hal_copy_kind_t kind) {
  if (size == 0) return HAL_OK;
  const bool dst_dev = kind == HAL_COPY_HOST_TO_DEVICE || kind == HAL_COPY_DEVICE_TO_DEVICE;
  const bool src_dev = kind == HAL_COPY_DEVICE_TO_HOST || kind == HAL_COPY_DEVICE_TO_DEVICE;
  void* d = dst_dev ? to_private(dst, size) : dst;
  const void* s = src_dev ? to_private(src, size) : src;
  if (d == nullptr || s == nullptr)
    return fail(HAL_ERR_INVALID_ARGUMENT, std::string("sim: memcpy ") +
                                              (d == nullptr ? "destination" : "source") + " is not " +
                                              std::to_string(size) + " bytes of device memory");
  std::memmove(d, s, size);
  return HAL_OK;
}

const hal_coll_args_t* translate(const hal_coll_args_t* args, hal_coll_args_t& local) {
  local = *args;
  // The buffers' extents depend on the op; any byte inside an allocation
  // maps the same way, and the inner vendor checks the sizes it uses.
  if (args->sendbuf != nullptr) {
    local.sendbuf = to_private(args->sendbuf, 0);
    if (local.sendbuf == nullptr) {
      fail(HAL_ERR_INVALID_ARGUMENT, "sim: sendbuf is not device memory");
      return nullptr;
    }
  }
  if (args->recvbuf != nullptr) {
    local.recvbuf = to_private(args->recvbuf, 0);
    if (local.recvbuf == nullptr) {
      fail(HAL_ERR_INVALID_ARGUMENT, "sim: recvbuf is not device memory");
      return nullptr;
    }
  }
  return &local;
}

}  // namespace sim_vendor::opaque
