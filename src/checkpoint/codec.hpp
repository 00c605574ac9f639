// Internal: one chunk in, one zstd frame out, and back. Encoding picks the
// codec: unchanged since the base (same xxh3) stores nothing; changed with
// a base stores shuffle(chunk ^ base) + zstd; without one, shuffle + zstd.
#pragma once

#include "format.hpp"

#include <vector>

namespace sigma::checkpoint::codec {

// Fills every field of the returned record but data_offset. `base` is the
// same chunk of the base (NULL: none), `base_xxh3` its raw hash.
// `frame` receives the stored bytes in its first stored_size bytes (none for
// an unchanged chunk); it is grown when too small and never shrunk, so that
// a reused frame costs no zero-filling.
format::Chunk encode(const uint8_t* raw, uint64_t bytes, uint32_t elem_size, const uint8_t* base,
                     uint64_t base_xxh3, int level, std::vector<uint8_t>& frame);

// Turns a chunk's stored bytes back into its raw bytes at `out`, checking
// the stored hash, the frame and the raw hash. `base_raw` is the base's raw
// chunk (needed by the delta codecs). `where` names file, tensor and chunk
// in the Error(data_loss) thrown on any failed check.
void decode(const format::Chunk& c, const uint8_t* stored, uint32_t elem_size, const uint8_t* base_raw,
            uint8_t* out, const std::string& where);

}  // namespace sigma::checkpoint::codec
