#include "regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sigma::files {

const char* kind_of_mode(unsigned mode) {
  return S_ISFIFO(mode)                   ? "a FIFO"
         : S_ISDIR(mode)                  ? "a folder"
         : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
         : S_ISSOCK(mode)                 ? "a socket"
                                          : "not a file";
}

bool read_regular(const std::string& path, uint64_t max_bytes, std::string& out, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    why = std::string("cannot open (") + std::strerror(errno) + ")";
    return false;
  }
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  if (!ok) {
    why = std::string("cannot stat (") + std::strerror(errno) + ")";
  } else if (!S_ISREG(st.st_mode)) {
    why = std::string("not a regular file (") + kind_of_mode(st.st_mode) + ")";
    ok = false;
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    why = "larger than " + std::to_string(max_bytes) + " bytes";
    ok = false;
  }
  out.clear();
  char buf[65536];
  while (ok) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::string("read failed (") + std::strerror(errno) + ")";
      ok = false;
    } else if (n == 0) {
      break;
    } else if (out.size() + static_cast<uint64_t>(n) > max_bytes) {  // grew while read
      why = "larger than " + std::to_string(max_bytes) + " bytes";
      ok = false;
    } else {
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace sigma::files
