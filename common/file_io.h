// Whole-buffer writes and whole-file reads on POSIX files, with errors that name the caller, the path
// and errno's text: "save_safetensors: writing /ckpt/model.safetensors failed: No space left on device".
#pragma once

#include <cstddef>
#include <string>

namespace lockstep {

// Writes all `n` bytes to `fd`, retrying short writes and EINTR. Throws lockstep::Error
// "<op>: writing <path> failed: <errno's text>".
void write_all(int fd, const void* data, size_t n, const char* op, const std::string& path);
// The same without throwing: false once the descriptor fails (a closed pipe, a full disk).
bool try_write_all(int fd, const void* data, size_t n);

// The whole contents of `path`. Throws lockstep::Error "<op>: <path>: cannot open (<errno's text>)" or
// "<op>: <path>: reading failed (<errno's text>)".
std::string read_file(const std::string& path, const char* op);

}  // namespace lockstep
