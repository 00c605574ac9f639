// Copies between a state's views (host memory, or HAL memory that may not
// be host-addressable) and one contiguous host image of them, the views
// tiling it in order: what the memory tier's snapshots and contained
// recovery's hand-off move. Thread-safety: any thread, on views no other
// thread writes. Each throws Error(invalid_argument) when `size` is not the
// views' total, and the plugin's error for a failed device copy.
#pragma once

#include <sigma/checkpoint.hpp>

#include <cstdint>
#include <vector>

namespace sigma::checkpoint {

// The views' bytes, in order, into `dst` (`size` bytes).
void copy_in(uint8_t* dst, uint64_t size, const std::vector<TensorView>& views);
// Bytes [from, from + len) of the image, held at `piece` (the range alone),
// into the views that hold them.
void copy_out_piece(const uint8_t* piece, uint64_t from, uint64_t len, const std::vector<TensorView>& views);
// Bytes [from, from + len) of an image at `src` into the views that hold them.
void copy_out_range(const uint8_t* src, uint64_t from, uint64_t len, const std::vector<TensorView>& views);
// Bytes [from, from + len) of the views' image into `piece` (the range alone).
void copy_in_piece(uint8_t* piece, uint64_t from, uint64_t len, const std::vector<TensorView>& views);
// The whole image (`size` bytes) into the views.
void copy_out(const uint8_t* src, uint64_t size, const std::vector<TensorView>& views);

}  // namespace sigma::checkpoint
