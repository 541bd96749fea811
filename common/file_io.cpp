// write_all, try_write_all and read_file over open/read/write, retrying EINTR.
#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace lockstep {

namespace {

// Writes until done or a failure; returns the errno of the failure, 0 when every byte was written.
int write_fully(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

}  // namespace

void write_all(int fd, const void* data, size_t n, const char* op, const std::string& path) {
  const int err = write_fully(fd, data, n);
  LOCKSTEP_CHECK(err == 0, op, ": writing ", path, " failed: ", std::strerror(err));
}

bool try_write_all(int fd, const void* data, size_t n) { return write_fully(fd, data, n) == 0; }

std::string read_file(const std::string& path, const char* op) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOCKSTEP_CHECK(fd >= 0, op, ": ", path, ": cannot open (", std::strerror(errno), ")");
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      fail(op, ": ", path, ": reading failed (", std::strerror(err), ")");
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

}  // namespace lockstep
