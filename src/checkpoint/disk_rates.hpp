// Internal: the device's read and write rates that the compression choice
// weighs the codec against, measured once per device per checkpoint root:
// 128 MiB written in the engine's own mode (O_DIRECT where the file system
// takes it: the streaming writes are timed; buffered: until fsync'ed),
// then read back past the page cache, and removed. The figures are kept in ROOT/.disk-rates (one line:
// device, read and write bytes/s), so the ranks of a job and later jobs in that root measure once between
// them (the first under a lock on ROOT/.disk-rates.lock; the others wait for it and read its figures).
#pragma once

#include "compression_choice.hpp"

#include <string>

namespace sigma::checkpoint::disk {

// The rates of the device holding `root` (an existing folder). Options'
// stated rates, when not 0, are taken as they are. Errors of the probe
// (a full disk) are Error(unavailable), as a save's would be.
choice::DiskRates rates(const std::string& root, double stated_read, double stated_write);

}  // namespace sigma::checkpoint::disk
