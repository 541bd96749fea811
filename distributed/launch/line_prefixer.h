// LinePrefixer: what launch --prefix-output does with each rank's stdout and stderr.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "common/file_io.h"

namespace lockstep::dist::launch {

// Copies a rank's stdout or stderr pipe to ours, one "[rankR]: " prefix per line.
class LinePrefixer {
 public:
  LinePrefixer(int pipe_fd, int out_fd, std::string prefix) : fd_(pipe_fd), out_(out_fd), prefix_(std::move(prefix)) {}
  LinePrefixer(LinePrefixer&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), out_(o.out_), prefix_(std::move(o.prefix_)), line_(std::exchange(o.line_, {})) {}
  LinePrefixer& operator=(LinePrefixer&&) = delete;
  ~LinePrefixer() {
    flush();
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }

  // Forwards what the pipe holds now; closes it at end of file.
  void pump() {
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        flush();
        ::close(fd_);
        fd_ = -1;
        return;
      }
      for (ssize_t i = 0; i < n; ++i) {
        line_ += buf[i];
        if (buf[i] == '\n' || line_.size() >= kMaxLine) emit();
      }
    }
  }

  // Emits a final line that lacks its newline.
  void flush() {
    if (line_.empty()) return;
    line_ += '\n';
    emit();
  }

 private:
  static constexpr size_t kMaxLine = 1 << 16;  // longer lines are split, so memory stays bounded
  void emit() {
    std::string out = prefix_ + line_;
    if (out.back() != '\n') out += '\n';
    // Our own stdout gone: nothing useful left to do with the text.
    lockstep::try_write_all(out_, out.data(), out.size());
    line_.clear();
  }
  int fd_;
  int out_;
  std::string prefix_;
  std::string line_;
};

}  // namespace lockstep::dist::launch
