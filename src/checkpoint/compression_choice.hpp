// Internal: whether compressing one chunk pays on this machine. Pure: the
// device's rates and what a sample of the chunk measured in, a choice and
// its figures out.
//
// The model (per raw byte; the engine's threads encode or decode chunks
// while the device streams, so the slower of the two bounds each side):
//   save     raw: 1 / write        compressed: max(ratio / write, 1 / (encode x threads))
//   restore  raw: 1 / read         compressed: max((ratio + base) / read, 1 / (decode x threads))
// where `base` is what a differential chunk makes a restore read of its
// base chunk (0 for a chunk of a base). A chunk is compressed when that
// makes neither its save nor its restore slower: on a fast local disk and
// few cores raw wins; on a slow or shared file system compression does.
#pragma once

#include <sigma/checkpoint.hpp>

#include <string>

namespace sigma::checkpoint::choice {

// The device's sustained rates, bytes/s: cold reads, and writes made durable.
struct DiskRates {
  double read = 0, write = 0;
};

// What compressing a sample of the chunk measured. Rates are raw bytes/s of
// one thread, hashes included.
struct Sample {
  double ratio = 1;   // stored / raw bytes
  double encode = 0;  // shuffle (and XOR), zstd, hashes
  double decode = 0;  // check, zstd, unshuffle (and XOR), hash
  double base = 0;    // base bytes read per raw byte to restore it compressed
};

// Seconds per raw byte of each way.
struct Costs {
  double raw_save = 0, raw_restore = 0, zstd_save = 0, zstd_restore = 0;
};

Costs costs(const Sample& s, const DiskRates& d, unsigned threads);

// Compress under `mode`: always, never, or (automatic) when it is no slower
// to save and to restore.
bool compress(Compression mode, const Costs& c);

// One line for `inspect`: the automatic choice and the figures it came
// from, e.g. "raw: zstd saves at 810 MB/s and restores at 1420 MB/s, raw
// at 1400 MB/s and 3310 MB/s".
std::string explain(bool compressed, const Costs& c);

}  // namespace sigma::checkpoint::choice
