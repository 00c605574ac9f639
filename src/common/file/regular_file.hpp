// Reading a file a user named: only a regular file is read, and nothing a
// user can name blocks the reader. A FIFO would block an open for reading
// until a writer came (for ever, in an agent's pre-flight); a device or a
// folder is not a configuration. A static helper linked into libsigma and
// its tools; not public API (a plugin carries its own: vendors/sim).
#pragma once

#include <cstdint>
#include <string>

namespace sigma::files {

// Reads the whole of `path` into `out` when it is a regular file of at most
// `max_bytes` bytes. Opens without blocking (O_NONBLOCK, then fstat on the
// descriptor, so no other file can be swapped in between). Returns false
// and sets `why` ("not a regular file (a FIFO)", "cannot open (No such file
// or directory)", "larger than 1048576 bytes", "read failed (...)") otherwise;
// `out` is then unspecified. Thread-safe; blocks only on the file's own I/O.
bool read_regular(const std::string& path, uint64_t max_bytes, std::string& out, std::string& why);

// What `mode` is, for a refusal: "a FIFO", "a folder", "a device", "a socket".
const char* kind_of_mode(unsigned mode);

}  // namespace sigma::files
