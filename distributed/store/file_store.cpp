// FileStore: the locked append-only log and the Store operations over it.
//
// Record layout (native little-endian): u8 kind (1 set, 2 delete), u32 key length, key, u32 value
// length, value. A record is written with one write() while the lock is held, so readers see whole
// records; a trailing partial record can only come from a writer that died mid-write and is cut off.
#include "distributed/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/check.h"

namespace lockstep::dist {
namespace {

constexpr uint8_t kSetRecord = 1;
constexpr uint8_t kDeleteRecord = 2;
constexpr auto kPollInterval = std::chrono::milliseconds(10);

// Live FileStores on the file, and how many have been destroyed: the cleanup rule of c10d's FileStore.
const std::string kRefCountKey = std::string(detail::kReservedKeyPrefix) + "filestore/refcount";
const std::string kFinishedKey = std::string(detail::kReservedKeyPrefix) + "filestore/finished";

// The opened file with an exclusive flock(), released on destruction.
class LockedFile {
 public:
  LockedFile(const std::string& path, Deadline deadline, const std::string& what) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    LOCKSTEP_CHECK(fd_ >= 0, "FileStore: ", what, ": cannot open ", path, ": ", std::strerror(errno));
    // LOCK_NB and a short sleep rather than a blocking flock(), so a stuck holder cannot hang us past
    // the deadline.
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      if (err != EWOULDBLOCK && err != EINTR) {
        ::close(fd_);
        fail("FileStore: ", what, ": cannot lock ", path, ": ", std::strerror(err));
      }
      if (Clock::now() >= deadline) {
        ::close(fd_);
        throw TimeoutError(lockstep::detail::str_cat("FileStore: ", what, ": could not lock ", path, " before the timeout"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~LockedFile() { ::close(fd_); }  // closing the last descriptor releases the flock
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

template <typename T>
bool read_pod(const std::vector<uint8_t>& buf, size_t& off, T* out) {
  if (buf.size() - off < sizeof(T)) return false;
  std::memcpy(out, buf.data() + off, sizeof(T));
  off += sizeof(T);
  return true;
}

void put_bytes(std::vector<uint8_t>& buf, const void* data, size_t n) {
  auto* p = static_cast<const uint8_t*>(data);
  buf.insert(buf.end(), p, p + n);
}

}  // namespace

FileStore::FileStore(std::string path, int world_size, std::chrono::milliseconds timeout)
    : Store(timeout), path_(std::move(path)), world_size_(world_size) {
  LOCKSTEP_CHECK(world_size == -1 || world_size >= 1, "FileStore(", path_, "): world_size must be -1 or at least 1, got ",
                 world_size);
  add(kRefCountKey, 1);
}

FileStore::~FileStore() {
  try {
    locked("~FileStore", [&](int fd) {
      int64_t finished = add_locked(fd, kFinishedKey, 1, "~FileStore");
      int64_t live = add_locked(fd, kRefCountKey, -1, "~FileStore");
      if (live == 0 && world_size_ > 0 && finished >= world_size_) ::unlink(path_.c_str());
    });
  } catch (const std::exception&) {
    // A destructor cannot report; the worst outcome is a leftover file.
  }
}

void FileStore::locked(const std::string& what, const std::function<void(int fd)>& fn) {
  std::lock_guard lock(mu_);
  LockedFile file(path_, deadline_after(timeout()), what);
  replay(file.fd(), what);
  fn(file.fd());
}

void FileStore::replay(int fd, const std::string& what) {
  struct stat st {};
  LOCKSTEP_CHECK(::fstat(fd, &st) == 0, "FileStore: ", what, ": fstat ", path_, ": ", std::strerror(errno));
  if (st.st_dev != dev_ || st.st_ino != ino_ || st.st_size < pos_) {
    // A different file (the old one was removed and recreated): start over.
    cache_.clear();
    pos_ = 0;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  if (st.st_size == pos_) return;
  std::vector<uint8_t> buf(static_cast<size_t>(st.st_size - pos_));
  for (size_t got = 0; got < buf.size();) {
    ssize_t n = ::pread(fd, buf.data() + got, buf.size() - got, pos_ + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    LOCKSTEP_CHECK(n > 0, "FileStore: ", what, ": read ", path_, ": ", n == 0 ? "unexpected end of file" : std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  size_t off = 0;
  for (;;) {
    size_t start = off;
    uint8_t kind;
    uint32_t klen, vlen;
    if (!read_pod(buf, off, &kind)) break;
    LOCKSTEP_CHECK(kind == kSetRecord || kind == kDeleteRecord, "FileStore: ", what, ": ", path_,
                   " is not a FileStore log (bad record kind ", static_cast<int>(kind), " at offset ", pos_ + start, ")");
    bool whole = read_pod(buf, off, &klen) && buf.size() - off >= klen;
    std::string key;
    if (whole) {
      key.assign(reinterpret_cast<const char*>(buf.data() + off), klen);
      off += klen;
      whole = read_pod(buf, off, &vlen) && buf.size() - off >= vlen;
    }
    if (!whole) {
      // A writer died mid-record (we hold the lock, so nobody is writing now): cut the torn tail off
      // so later appends stay parseable.
      LOCKSTEP_CHECK(::ftruncate(fd, pos_ + static_cast<off_t>(start)) == 0, "FileStore: ", what, ": truncate ",
                     path_, ": ", std::strerror(errno));
      off = start;
      break;
    }
    if (kind == kSetRecord) {
      cache_[key].assign(buf.begin() + static_cast<ptrdiff_t>(off), buf.begin() + static_cast<ptrdiff_t>(off + vlen));
    } else {
      cache_.erase(key);
    }
    off += vlen;
  }
  pos_ += static_cast<off_t>(off);
}

void FileStore::append(int fd, bool is_delete, const std::string& key, const std::vector<uint8_t>& value,
                       const std::string& what) {
  LOCKSTEP_CHECK(key.size() <= UINT32_MAX && value.size() <= UINT32_MAX, "FileStore: ", what,
                 ": key or value longer than 4 GiB");
  std::vector<uint8_t> rec;
  rec.reserve(9 + key.size() + value.size());
  uint8_t kind = is_delete ? kDeleteRecord : kSetRecord;
  uint32_t klen = static_cast<uint32_t>(key.size()), vlen = static_cast<uint32_t>(value.size());
  put_bytes(rec, &kind, 1);
  put_bytes(rec, &klen, 4);
  put_bytes(rec, key.data(), key.size());
  put_bytes(rec, &vlen, 4);
  put_bytes(rec, value.data(), value.size());
  for (size_t done = 0; done < rec.size();) {
    ssize_t n = ::write(fd, rec.data() + done, rec.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      if (::ftruncate(fd, pos_) != 0) { /* the next replay cuts the partial record off */ }
      fail("FileStore: ", what, ": write ", path_, ": ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  pos_ += static_cast<off_t>(rec.size());
  if (is_delete) {
    cache_.erase(key);
  } else {
    cache_[key] = value;
  }
}

int64_t FileStore::add_locked(int fd, const std::string& key, int64_t delta, const std::string& what) {
  int64_t value = 0;
  auto it = cache_.find(key);
  LOCKSTEP_CHECK(it == cache_.end() || detail::parse_counter(it->second, &value), "FileStore: ", what,
                 ": the stored value ", detail::quote(to_string(it->second)), " is not an integer");
  LOCKSTEP_CHECK(!__builtin_add_overflow(value, delta, &value), "FileStore: ", what, ": overflows int64");
  append(fd, false, key, to_bytes(std::to_string(value)), what);
  return value;
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::string what = "set(" + detail::quote(key) + ")";
  locked(what, [&](int fd) { append(fd, false, key, value, what); });
}

std::vector<uint8_t> FileStore::get(const std::string& key) {
  std::string what = "get(" + detail::quote(key) + ")";
  auto t = timeout();
  Deadline deadline = deadline_after(t);
  for (;;) {
    std::vector<uint8_t> value;
    bool found = false;
    locked(what, [&](int) {
      auto it = cache_.find(key);
      if ((found = it != cache_.end())) value = it->second;
    });
    if (found) return value;
    if (Clock::now() >= deadline) {
      throw TimeoutError(lockstep::detail::str_cat("FileStore: ", what, ": key not set within ", detail::format_seconds(t),
                                         " (file ", path_, ")"));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::string what = "add(" + detail::quote(key) + ", " + std::to_string(delta) + ")";
  int64_t value = 0;
  locked(what, [&](int fd) { value = add_locked(fd, key, delta, what); });
  return value;
}

std::vector<uint8_t> FileStore::compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                            const std::vector<uint8_t>& desired) {
  std::string what = "compare_set(" + detail::quote(key) + ")";
  std::vector<uint8_t> result;
  locked(what, [&](int fd) {
    auto it = cache_.find(key);
    if (it == cache_.end() && !expected.empty()) {
      result = expected;  // c10d's answer for a missing key
    } else if (it == cache_.end() || it->second == expected) {
      append(fd, false, key, desired, what);
      result = desired;
    } else {
      result = it->second;
    }
  });
  return result;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string what = "wait(" + detail::quote_all(keys) + ")";
  Deadline deadline = deadline_after(timeout);
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      throw TimeoutError(lockstep::detail::str_cat("FileStore: ", what, ": keys not all set within ",
                                         detail::format_seconds(timeout), " (file ", path_, ")"));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

bool FileStore::check(const std::vector<std::string>& keys) {
  bool all = false;
  locked("check(" + detail::quote_all(keys) + ")", [&](int) {
    all = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return cache_.count(k) > 0; });
  });
  return all;
}

bool FileStore::delete_key(const std::string& key) {
  std::string what = "delete_key(" + detail::quote(key) + ")";
  bool existed = false;
  locked(what, [&](int fd) {
    if ((existed = cache_.count(key) > 0)) append(fd, true, key, {}, what);
  });
  return existed;
}

int64_t FileStore::num_keys() {
  int64_t n = 0;
  locked("num_keys()", [&](int) {
    n = std::count_if(cache_.begin(), cache_.end(), [](const auto& kv) { return !detail::is_reserved_key(kv.first); });
  });
  return n;
}

}  // namespace lockstep::dist
