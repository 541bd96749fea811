// FileStore: a single-host Store kept in a file that every process opens (c10d's FileStore). The file
// is an append-only log of set/delete records; each call takes an flock() on it, replays the records
// it has not seen yet into a local map, then appends its own. get/wait poll the file every 10 ms.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::dist {

class FileStore : public Store {
 public:
  // world_size: how many FileStores will open `path` over the job; the last of them to be destroyed
  // removes the file. -1 leaves the file in place. Throws when the file cannot be opened.
  explicit FileStore(std::string path, int world_size = -1, std::chrono::milliseconds timeout = kDefaultTimeout);
  ~FileStore() override;

  using Store::compare_set;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<uint8_t> compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                   const std::vector<uint8_t>& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& path() const { return path_; }

 private:
  // Opens and locks the file, replays new records into cache_, then runs fn(fd) under mu_ and the lock.
  void locked(const std::string& what, const std::function<void(int fd)>& fn);
  void replay(int fd, const std::string& what);
  void append(int fd, bool is_delete, const std::string& key, const std::vector<uint8_t>& value,
              const std::string& what);
  int64_t add_locked(int fd, const std::string& key, int64_t delta, const std::string& what);

  std::string path_;
  int world_size_;
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<uint8_t>> cache_;  // the log replayed up to pos_
  off_t pos_ = 0;
  dev_t dev_ = 0;  // identity of the file replayed, to notice it being removed and recreated
  ino_t ino_ = 0;
};

}  // namespace lockstep::dist
