// libsigma built without CUDA: no buffer is ever on a device.
#include "device.hpp"

#include <sigma/error.hpp>

namespace sigma::kernels::device {

bool on_device(const void*) { return false; }

namespace {
[[noreturn]] void none() { throw Error(Code::not_supported, "kernels: libsigma was built without CUDA"); }
}  // namespace

ScanResult scan(const void*, uint64_t, hal_dtype_t) { none(); }
void shuffle(const void*, const void*, void*, uint64_t, uint32_t, bool) { none(); }
void xor_bytes(const void*, const void*, void*, uint64_t) { none(); }
uint64_t checksum_parallel(const void*, uint64_t) { none(); }
void moe_permute(const void*, uint64_t, uint64_t, const int64_t*, uint32_t, void*) { none(); }
void moe_unpermute(const void*, const int64_t*, const float*, uint64_t, uint32_t, uint64_t, hal_dtype_t,
                   void*) {
  none();
}

}  // namespace sigma::kernels::device
