// GlooStoreAdapter: lets gloo's rendezvous (gloo::rendezvous::Context::connectFullMesh) exchange its
// pair addresses through a lockstep Store. Errors and timeouts are the Store's (lockstep::Error).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::dist {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // Throws lockstep::Error when `store` is null.
  explicit GlooStoreAdapter(std::shared_ptr<dist::Store> store);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<dist::Store> store_;
};

}  // namespace lockstep::dist
