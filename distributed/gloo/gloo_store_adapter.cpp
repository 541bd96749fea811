// GlooStoreAdapter: gloo's rendezvous store interface over a lockstep Store.
#include "distributed/gloo/gloo_store_adapter.h"

namespace lockstep::dist {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {
  LOCKSTEP_CHECK(store_ != nullptr, "GlooStoreAdapter: the store is null");
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  auto value = store_->get(key);
  return {value.begin(), value.end()};
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace lockstep::dist
