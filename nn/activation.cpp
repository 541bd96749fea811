// PReLU's parameter (its function, like every activation's, is in autograd/activation.cpp).
#include "nn/activation.h"

#include "common/check.h"
#include "tensor/factory.h"

namespace lockstep::nn {

PReLUImpl::PReLUImpl(const PReLUOptions& options) : Module("PReLU"), options(options) {
  LOCKSTEP_CHECK(options.num_parameters() >= 1, "PReLU: num_parameters must be at least 1, got ",
                 options.num_parameters());
  weight = register_parameter("weight", full({options.num_parameters()}, options.init()));
}

}  // namespace lockstep::nn
