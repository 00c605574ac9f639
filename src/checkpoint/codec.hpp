// Internal: one chunk in, its stored bytes out, and back. Encoding picks the
// codec: unchanged since the base (same xxh3) stores nothing; otherwise the
// chunk is compressed -- shuffle(chunk ^ base) + zstd with a base, shuffle
// + zstd without -- or stored raw, as the Plan's mode decides (the
// automatic mode from a sample of the chunk, compression_choice.hpp).
#pragma once

#include "compression_choice.hpp"
#include "format.hpp"

#include <vector>

namespace sigma::checkpoint::codec {

// How a writer chooses codecs.
struct Plan {
  Compression mode = Compression::always;
  choice::DiskRates disk;  // for the automatic mode
  unsigned threads = 1;    // the writer's encoding threads
  int level = 1;           // zstd's
};

// Fills every field of the returned record but data_offset. `base` is the
// same chunk of the base (NULL: none), `base_xxh3` its raw hash and
// `base_ratio` its stored/raw bytes (what restoring a delta of it reads).
// A compressed chunk's stored bytes go to the first stored_size bytes of
// `frame`, which is grown when too small and never shrunk (a reused frame
// costs no zero-filling); a raw chunk's stored bytes are `raw` itself.
format::Chunk encode(const uint8_t* raw, uint64_t bytes, uint32_t elem_size, const uint8_t* base,
                     uint64_t base_xxh3, double base_ratio, const Plan& plan, std::vector<uint8_t>& frame);

// Turns a compressed or unchanged chunk's stored bytes back into its raw
// bytes at `out`, checking the stored hash, the frame and the raw hash.
// `base_raw` is the base's raw chunk (needed by the delta codecs). `where`
// names file, tensor and chunk in the Error(data_loss) thrown on any failed
// check. Raw chunks are read straight into place instead (check_raw_hash).
void decode(const format::Chunk& c, const uint8_t* stored, uint32_t elem_size, const uint8_t* base_raw,
            uint8_t* out, const std::string& where);

// Checks a raw chunk's bytes, by the hash the reader took of them as they
// went by, against the record; Error(data_loss) naming `where` otherwise.
void check_raw_hash(const format::Chunk& c, uint64_t xxh3, const std::string& where);

}  // namespace sigma::checkpoint::codec
