// nn::init: in-place initialisers with torch.nn.init's names and fan rules. Values are drawn on the
// host from the default generator (manual_seed) and copied into the tensor, whatever its device;
// none is recorded by autograd.
//
// Fans, as torch.nn.init._calculate_fan_in_and_fan_out: for a weight [out, in, k...],
// fan_in = in * prod(k) and fan_out = out * prod(k); a 1-D tensor has no fans (an error).
#pragma once

#include <string>
#include <utility>

#include "tensor/tensor.h"

namespace lockstep::nn::init {

// torch.nn.init.calculate_gain: linear/conv*/sigmoid 1, tanh 5/3, relu sqrt(2),
// leaky_relu sqrt(2 / (1 + param^2)) (param defaults to 0.01), selu 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
// 1 / sqrt(fan_in): the bound of PyTorch's default bias initialisation for Linear and Conv.
double fan_in_bound(const Tensor& weight);

Tensor& uniform_(Tensor& t, double a = 0, double b = 1);
// normal_ and trunc_normal_ on a device tensor draw there (randn's device stream, tensor/factory.h): the
// same seed gives other values than for a CPU tensor, as torch.cuda's generator does.
Tensor& normal_(Tensor& t, double mean = 0, double std = 1);
// Normal(mean, std) redrawn until inside [a, b].
Tensor& trunc_normal_(Tensor& t, double mean = 0, double std = 1, double a = -2, double b = 2);
Tensor& constant_(Tensor& t, double value);
Tensor& ones_(Tensor& t);
Tensor& zeros_(Tensor& t);
// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1);
// U(-b, b) with b = sqrt(3) * gain / sqrt(fan), fan = fan_in or fan_out (mode), gain from
// calculate_gain(nonlinearity, a).
Tensor& kaiming_uniform_(Tensor& t, double a = 0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu");
// N(0, std^2) with std = gain / sqrt(fan).
Tensor& kaiming_normal_(Tensor& t, double a = 0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu");

}  // namespace lockstep::nn::init
