// PrefixStore: a Store decorator that namespaces every key as "prefix/key" (c10d's PrefixStore), so
// several process groups can share one underlying store without their keys colliding.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::dist {

class PrefixStore : public Store {
 public:
  // Throws lockstep::Error when `store` is null. Timeouts are the underlying store's.
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

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
  // The underlying store's count, every prefix included (as in c10d).
  int64_t num_keys() override;

  void set_timeout(std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds timeout() const override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying() const { return store_; }

 private:
  std::string join(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace lockstep::dist
