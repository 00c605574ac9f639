// Opaque device memory for the sim vendor (option opaque=1): the proof that
// libsigma never reads a device pointer. Each allocation is one memfd
// mapped twice: the address handed to the host is mapped PROT_NONE (any
// read or write through it by the host crashes), and the plugin works on a
// private read-write mapping of the same pages. memcpy, the collectives
// (through the inner vendor) and the kernels extension translate device
// pointers to private ones.
#pragma once

#include <sigma/hal.h>

#include <cstdint>

namespace sim_vendor::opaque {

// Set by init from the options; read by every entry. Off: memory is the
// inner vendor's (host memory).
void set_enabled(bool on);
bool enabled();
// Whether the kernels extension runs calls (option kernels, default 1).
void set_kernels(bool on);
bool kernels();

// Thread-safety of all below: any thread, concurrently.
hal_status_t alloc(uint64_t size, uint64_t alignment, void** handle);
// INVALID_ARGUMENT for an address that is not an allocation's start.
hal_status_t release(void* handle);
void free_all();
// The private address of device pointer `p` (any offset inside an
// allocation, with `bytes` more bytes there), or nullptr when it is not
// inside one.
void* to_private(const void* p, uint64_t bytes);
hal_status_t copy(void* dst, const void* src, uint64_t size, hal_copy_kind_t kind);
// Coll args with device pointers replaced by private ones, in `local`;
// returns &local, or nullptr (with the message set) when a buffer is not
// device memory.
const hal_coll_args_t* translate(const hal_coll_args_t* args, hal_coll_args_t& local);

}  // namespace sim_vendor::opaque

namespace sim_vendor {
// The kernels extension (kernels.cpp): libsigma's CPU kernels run on the
// private mappings.
extern const hal_ext_kernels_t k_kernels_ext;
}  // namespace sim_vendor
