// ShmSegment: one job's shared-memory segment for the ranks of one host (POSIX shm_open + mmap).
//
// The first local rank creates it under a fresh random name (O_EXCL: two jobs never share one), with
// every page reserved up front (posix_fallocate: a full /dev/shm is an error here, not a SIGBUS later),
// and writes a header: a magic number, the layout version, the job's nonce (published through the
// store with the name), the number of ranks and the size. The others attach by name and refuse a
// segment whose header or size is not what this job expects. With a job token (job_token.h) the header
// also carries a tag, HMAC(token, nonce, name): only a process that holds the token can make a segment
// that the ranks accept, and a segment whose tag does not match is refused. Every rank counts itself in the header
// once mapped, and the last one removes the name, so nothing is left in /dev/shm after setup: the
// memory lives on while mapped and goes with the last process, however the job ends.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "distributed/net/job_token.h"

namespace lockstep::dist::shm {

struct SegmentHeader {
  static constexpr uint64_t kMagic = 0x314d48535453434bULL;  // "KCSTSHM1" little-endian: lockstep shm v1
  static constexpr uint32_t kVersion = 2;  // 2: the job token's tag
  uint64_t magic;
  uint32_t version;
  uint32_t ranks;
  uint64_t nonce[2];
  uint64_t bytes;
  std::atomic<uint32_t> attached;  // ranks that have mapped the segment
  uint8_t tag[JobToken::kMacBytes];  // HMAC(token, nonce, name); zeros without a token
};

class ShmSegment {
 public:
  // Creates and maps `name` ("/lockstep-..."), `bytes` long (the header included), zero-filled.
  // Throws naming the name and errno (e.g. /dev/shm too small).
  static ShmSegment create(const std::string& name, size_t bytes, uint32_t ranks, const uint64_t nonce[2],
                           const JobToken& token = {});
  // Opens and maps `name`, checking that it is `bytes` long and carries this job's header (and, with
  // `token` enabled, its tag); throws "refused: ..." otherwise.
  static ShmSegment attach(const std::string& name, size_t bytes, uint32_t ranks, const uint64_t nonce[2],
                           const JobToken& token = {});
  // Removes the name (the mapping stays valid); ENOENT (already removed) is not an error.
  static void unlink(const std::string& name);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Counts this rank as attached; true when it was the last, which then removes the name.
  bool count_attached();

  SegmentHeader& header() const { return *static_cast<SegmentHeader*>(base_); }
  // The bytes after the header's cache lines.
  char* data() const { return static_cast<char*>(base_) + kHeaderBytes; }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  static constexpr size_t kHeaderBytes = 256;

 private:
  ShmSegment(std::string name, void* base, size_t bytes) : name_(std::move(name)), base_(base), bytes_(bytes) {}

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lockstep::dist::shm
