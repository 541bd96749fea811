// Random ops. Draws come from the default generator (tensor/generator.h): uniform draws, dropout's mask
// and bernoulli samples for a device are made on it (tensor/philox.h), the rest on the host and moved to
// the input's device.
#include <algorithm>
#include <cmath>

#include "autograd/autograd_util.h"
#include "autograd/functions.h"
#include "tensor/backend.h"
#include "tensor/generator.h"

namespace lockstep {

namespace in = internal;

Tensor bernoulli(const Tensor& p) {
  LOCKSTEP_CHECK(p.defined() && p.is_floating_point(), "bernoulli: expected a floating-point tensor of probabilities",
                 p.defined() ? std::string(", got ") + dtype_name(p.dtype()) : std::string());
  if (supports(p.device(), Capability::kPhiloxRandom, p.dtype())) {
    // Drawn on the device in p's dtype from the draws rand() would make there (the same samples).
    Tensor out(p.shape(), p.dtype(), p.device());
    Generator& g = default_generator();
    backend_for(p.device()).bernoulli(out, in::contiguous(p), g.seed(),
                                      g.reserve_philox(static_cast<uint64_t>(out.numel())));
    return out;
  }
  Tensor u = rand(p.shape(), {p.dtype() == kFloat64 ? kFloat64 : kFloat32, p.device()});
  return in::to_dtype(in::binary(BinaryOp::Lt, u, p), p.dtype());
}

Tensor dropout(const Tensor& a, double p, bool train) {
  LOCKSTEP_CHECK(a.defined(), "dropout: got an undefined tensor");
  LOCKSTEP_CHECK(p >= 0 && p <= 1, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!train || p == 0) return a;
  if (p == 1) return mul(a, 0.0);
  // keep ~ Bernoulli(1 - p), scaled by 1 / (1 - p) so the expectation is unchanged.
  if (supports(a.device(), Capability::kPhiloxRandom, a.dtype())) {
    // The mask made on the device in a's dtype from the draws rand() would make there (the same mask).
    Tensor mask(a.shape(), a.dtype(), a.device());
    Generator& g = default_generator();
    backend_for(a.device()).dropout_mask(mask, p, g.seed(), g.reserve_philox(static_cast<uint64_t>(mask.numel())));
    return mul(a, mask);
  }
  Tensor u = rand(a.shape(), {a.dtype() == kFloat64 ? kFloat64 : kFloat32, a.device()});
  Tensor mask = in::mul(in::to_dtype(in::binary_scalar(BinaryOp::Ge, u, p), a.dtype()), 1.0 / (1.0 - p));
  return mul(a, mask);
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  LOCKSTEP_CHECK(probs.defined() && (probs.dim() == 1 || probs.dim() == 2) && probs.is_floating_point(),
                 "multinomial: expected a floating-point tensor of weights [C] or [N, C]",
                 probs.defined() ? ", got " + shape_str(probs.shape()) + " " + dtype_name(probs.dtype()) : "");
  const int64_t rows = probs.dim() == 1 ? 1 : probs.size(0), c = probs.size(-1);
  LOCKSTEP_CHECK(num_samples > 0 && (replacement || num_samples <= c), "multinomial: cannot draw ", num_samples,
                 " samples from ", c, " categories", replacement ? "" : " without replacement");
  std::vector<double> w = probs.to_vector<double>();
  std::vector<int64_t> out(rows * num_samples);
  Generator& gen = default_generator();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> row(w.begin() + r * c, w.begin() + (r + 1) * c);
    for (int64_t j = 0; j < c; ++j)
      LOCKSTEP_CHECK(row[j] >= 0 && std::isfinite(row[j]), "multinomial: weight ", row[j], " at row ", r, ", column ",
                     j, " is negative, infinite or NaN");
    for (int64_t s = 0; s < num_samples; ++s) {
      double total = 0;
      for (double x : row) total += x;
      LOCKSTEP_CHECK(total > 0, "multinomial: row ", r, " has no positive weight left");
      // The first category whose running sum passes u * total.
      double u = gen.uniform_double() * total, acc = 0;
      int64_t pick = c - 1;
      for (int64_t j = 0; j < c; ++j) {
        acc += row[j];
        if (u < acc && row[j] > 0) {
          pick = j;
          break;
        }
      }
      out[r * num_samples + s] = pick;
      if (!replacement) row[pick] = 0;
    }
  }
  Shape shape = probs.dim() == 1 ? Shape{num_samples} : Shape{rows, num_samples};
  return tensor(out, shape, probs.device());
}

}  // namespace lockstep
