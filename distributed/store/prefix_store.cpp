// PrefixStore: forwards every call to the underlying store with "prefix/" in front of each key.
#include "distributed/store/prefix_store.h"

#include "common/check.h"

namespace lockstep::dist {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  LOCKSTEP_CHECK(store_ != nullptr, "PrefixStore(", detail::quote(prefix_), "): the underlying store is null");
}

std::vector<std::string> PrefixStore::join(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(join(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::vector<uint8_t>& value) { store_->set(join(key), value); }

std::vector<uint8_t> PrefixStore::get(const std::string& key) { return store_->get(join(key)); }

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return store_->add(join(key), delta); }

std::vector<uint8_t> PrefixStore::compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                              const std::vector<uint8_t>& desired) {
  return store_->compare_set(join(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(join(keys), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return store_->check(join(keys)); }

bool PrefixStore::delete_key(const std::string& key) { return store_->delete_key(join(key)); }

int64_t PrefixStore::num_keys() { return store_->num_keys(); }

void PrefixStore::set_timeout(std::chrono::milliseconds timeout) { store_->set_timeout(timeout); }

std::chrono::milliseconds PrefixStore::timeout() const { return store_->timeout(); }

}  // namespace lockstep::dist
