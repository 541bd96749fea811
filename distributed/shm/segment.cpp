// ShmSegment: creating, attaching and checking a job's shared-memory segment.
#include "distributed/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <span>
#include <utility>

#include "common/check.h"

namespace lockstep::dist::shm {

static_assert(sizeof(SegmentHeader) <= ShmSegment::kHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free, "atomics in shared memory must be lock-free");

namespace {

// Closes a descriptor at the end of a scope.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void* map(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  LOCKSTEP_CHECK(p != MAP_FAILED, "shared memory: cannot map ", name, " (", bytes, " bytes): ", std::strerror(errno));
  return p;
}

constexpr const char* kTagContext = "lockstep shm v1 segment";

std::span<const uint8_t> nonce_bytes(const uint64_t nonce[2]) {
  return {reinterpret_cast<const uint8_t*>(nonce), 2 * sizeof(uint64_t)};
}

std::span<const uint8_t> name_bytes(const std::string& name) {
  return {reinterpret_cast<const uint8_t*>(name.data()), name.size()};
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes, uint32_t ranks, const uint64_t nonce[2],
                              const JobToken& token) {
  LOCKSTEP_CHECK(bytes > kHeaderBytes, "shared memory: segment size ", bytes, " leaves no room after the header");
  Fd fd{::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600)};
  LOCKSTEP_CHECK(fd.fd >= 0, "shared memory: cannot create ", name, ": ", std::strerror(errno));
  // From here the name exists: remove it on any failure.
  try {
    // posix_fallocate returns the error instead of setting errno.
    const int err = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(bytes));
    LOCKSTEP_CHECK(err == 0, "shared memory: cannot reserve ", bytes, " bytes for ", name, " in /dev/shm: ",
                   std::strerror(err), err == ENOSPC ? " (is /dev/shm too small? see `df -h /dev/shm`)" : "");
    ShmSegment s(name, map(fd.fd, bytes, name), bytes);
    auto* h = new (s.base_) SegmentHeader{};
    h->version = SegmentHeader::kVersion;
    h->ranks = ranks;
    h->nonce[0] = nonce[0];
    h->nonce[1] = nonce[1];
    h->bytes = bytes;
    h->attached.store(0);
    if (token.enabled()) {
      const JobToken::Mac tag = token.prove(kTagContext, nonce_bytes(nonce), name_bytes(name));
      std::memcpy(h->tag, tag.data(), tag.size());
    }
    // The magic last, a release store: an attacher that reads it with acquire sees the rest.
    reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->store(SegmentHeader::kMagic, std::memory_order_release);
    return s;
  } catch (...) {
    unlink(name);
    throw;
  }
}

ShmSegment ShmSegment::attach(const std::string& name, size_t bytes, uint32_t ranks, const uint64_t nonce[2],
                              const JobToken& token) {
  Fd fd{::shm_open(name.c_str(), O_RDWR, 0)};
  LOCKSTEP_CHECK(fd.fd >= 0, "shared memory: cannot open ", name, ": ", std::strerror(errno),
                 errno == ENOENT ? " (removed already: did a rank of this job fail or attach twice?)" : "");
  struct stat st {};
  LOCKSTEP_CHECK(::fstat(fd.fd, &st) == 0, "shared memory: cannot stat ", name, ": ", std::strerror(errno));
  LOCKSTEP_CHECK(static_cast<size_t>(st.st_size) == bytes, "shared memory: refused ", name, ": it has ", st.st_size,
                 " bytes, this job expects ", bytes, " (a segment of another job or another lockstep version)");
  ShmSegment s(name, map(fd.fd, bytes, name), bytes);
  const SegmentHeader& h = s.header();
  const uint64_t magic = reinterpret_cast<const std::atomic<uint64_t>*>(&h.magic)->load(std::memory_order_acquire);
  LOCKSTEP_CHECK(magic == SegmentHeader::kMagic && h.version == SegmentHeader::kVersion, "shared memory: refused ",
                 name, ": not a lockstep segment of layout version ", SegmentHeader::kVersion);
  LOCKSTEP_CHECK(h.nonce[0] == nonce[0] && h.nonce[1] == nonce[1], "shared memory: refused ", name,
                 ": it belongs to another job (its nonce differs from the one this job published)");
  LOCKSTEP_CHECK(!token.enabled() || token.verify(kTagContext, nonce_bytes(nonce), name_bytes(name), h.tag),
                 "shared memory: refused ", name, ": its tag does not prove this job's token (made by a process "
                 "without it, or by a rank with a different LOCKSTEP_JOB_TOKEN)");
  LOCKSTEP_CHECK(h.ranks == ranks && h.bytes == bytes, "shared memory: refused ", name, ": made for ", h.ranks,
                 " ranks and ", h.bytes, " bytes, this job has ", ranks, " ranks on this host and expects ", bytes);
  return s;
}

void ShmSegment::unlink(const std::string& name) {
  if (!name.empty()) ::shm_unlink(name.c_str());  // ENOENT: another rank removed it
}

bool ShmSegment::count_attached() {
  const uint32_t now = header().attached.fetch_add(1) + 1;
  if (now != header().ranks) return false;
  unlink(name_);
  return true;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)), base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (base_) ::munmap(base_, bytes_);
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (base_) ::munmap(base_, bytes_);
}

}  // namespace lockstep::dist::shm
