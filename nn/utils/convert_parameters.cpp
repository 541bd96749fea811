// parameters_to_vector and vector_to_parameters (convert_parameters.h).
#include "nn/utils/convert_parameters.h"

#include "autograd/functions.h"
#include "tensor/ops.h"

namespace lockstep::nn::utils {
namespace {

// PyTorch's _check_param_device: every parameter on the first one's device.
void check_devices(const std::vector<Tensor>& parameters, const char* op) {
  for (size_t i = 0; i < parameters.size(); ++i) {
    LOCKSTEP_CHECK(parameters[i].defined(), op, ": parameter ", i, " is undefined");
    LOCKSTEP_CHECK(parameters[i].device() == parameters[0].device(), op, ": Found two parameters on different "
                   "devices, this is currently not supported (parameter 0 on ", parameters[0].device(), ", parameter ",
                   i, " on ", parameters[i].device(), ")");
  }
}

}  // namespace

Tensor parameters_to_vector(const std::vector<Tensor>& parameters) {
  LOCKSTEP_CHECK(!parameters.empty(), "parameters_to_vector: expected at least one parameter");
  check_devices(parameters, "parameters_to_vector");
  std::vector<Tensor> flat;
  for (const Tensor& p : parameters) flat.push_back(reshape(p, {p.numel()}));
  return cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters) {
  LOCKSTEP_CHECK(vec.defined(), "vector_to_parameters: the vector is undefined");
  check_devices(parameters, "vector_to_parameters");
  int64_t total = 0;
  for (const Tensor& p : parameters) total += p.numel();
  LOCKSTEP_CHECK(vec.dim() == 1 && vec.numel() == total, "vector_to_parameters: expected a 1-D vector of ", total,
                 " elements (the parameters' total), got ", vec.shape());
  LOCKSTEP_CHECK(parameters.empty() || vec.device() == parameters[0].device(), "vector_to_parameters: vector on ",
                 vec.device(), " but parameters on ", parameters[0].device());
  Tensor v = vec.detach();
  int64_t at = 0;
  for (const Tensor& p : parameters) {
    Tensor param = p;
    param.set_data(internal::view(internal::narrow(v, 0, at, p.numel()), p.shape()));
    at += p.numel();
  }
}

}  // namespace lockstep::nn::utils
