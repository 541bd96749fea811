// Tensor's differentiable methods (declared in tensor/tensor.h for PyTorch's spelling), forwarding to
// the ops in autograd/functions.h; Tensor::index; the in-place methods.
#include <algorithm>

#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

namespace in = internal;

Tensor Tensor::view(const Shape& s) const { return lockstep::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return lockstep::reshape(*this, s); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return lockstep::flatten(*this, s, e); }
Tensor Tensor::unflatten(int64_t d, const Shape& sizes) const {
  const int64_t k = in::wrap_dim(d, dim(), "unflatten");
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  LOCKSTEP_CHECK(n == shape()[k], "unflatten: sizes ", sizes, " do not multiply to dimension ", d, " of size ",
                 shape()[k], " (shape ", shape(), ")");
  Shape s(shape().begin(), shape().begin() + k);
  s.insert(s.end(), sizes.begin(), sizes.end());
  s.insert(s.end(), shape().begin() + k + 1, shape().end());
  return lockstep::reshape(*this, s);
}
Tensor Tensor::t() const { return lockstep::transpose(*this); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return lockstep::transpose(*this, a, b); }
Tensor Tensor::permute(const std::vector<int64_t>& d) const { return lockstep::permute(*this, d); }
Tensor Tensor::expand(const Shape& s) const { return lockstep::expand(*this, s); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t n) const { return lockstep::narrow(*this, d, s, n); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return lockstep::slice(*this, d, s, e, st); }
Tensor Tensor::select(int64_t d, int64_t i) const { return lockstep::select(*this, d, i); }
Tensor Tensor::unsqueeze(int64_t d) const { return lockstep::unsqueeze(*this, d); }
Tensor Tensor::squeeze() const { return lockstep::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return lockstep::squeeze(*this, d); }
std::vector<Tensor> Tensor::split(int64_t n, int64_t d) const { return lockstep::split(*this, n, d); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& s, int64_t d) const { return lockstep::split(*this, s, d); }
std::vector<Tensor> Tensor::chunk(int64_t n, int64_t d) const { return lockstep::chunk(*this, n, d); }
std::vector<Tensor> Tensor::unbind(int64_t d) const { return lockstep::unbind(*this, d); }
Tensor Tensor::unfold(int64_t d, int64_t n, int64_t s) const { return lockstep::unfold(*this, d, n, s); }
Tensor Tensor::contiguous() const { return lockstep::contiguous(*this); }
Tensor Tensor::clone() const { return lockstep::clone(*this); }
Tensor Tensor::to(Device d) const { return lockstep::to(*this, d); }
Tensor Tensor::to(Dtype d) const { return lockstep::to(*this, d); }

Tensor Tensor::neg() const { return lockstep::neg(*this); }
Tensor Tensor::abs() const { return lockstep::abs(*this); }
Tensor Tensor::sign() const { return lockstep::sign(*this); }
Tensor Tensor::relu() const { return lockstep::relu(*this); }
Tensor Tensor::exp() const { return lockstep::exp(*this); }
Tensor Tensor::floor() const { return lockstep::floor(*this); }
Tensor Tensor::ceil() const { return lockstep::ceil(*this); }
Tensor Tensor::round() const { return lockstep::round(*this); }
Tensor Tensor::trunc() const { return lockstep::trunc(*this); }
Tensor Tensor::frac() const { return lockstep::frac(*this); }
Tensor Tensor::reciprocal() const { return lockstep::reciprocal(*this); }
Tensor Tensor::log1p() const { return lockstep::log1p(*this); }
Tensor Tensor::expm1() const { return lockstep::expm1(*this); }
Tensor Tensor::log2() const { return lockstep::log2(*this); }
Tensor Tensor::log10() const { return lockstep::log10(*this); }
Tensor Tensor::erf() const { return lockstep::erf(*this); }
Tensor Tensor::erfc() const { return lockstep::erfc(*this); }
Tensor Tensor::erfinv() const { return lockstep::erfinv(*this); }
Tensor Tensor::tan() const { return lockstep::tan(*this); }
Tensor Tensor::asin() const { return lockstep::asin(*this); }
Tensor Tensor::acos() const { return lockstep::acos(*this); }
Tensor Tensor::atan() const { return lockstep::atan(*this); }
Tensor Tensor::sinh() const { return lockstep::sinh(*this); }
Tensor Tensor::cosh() const { return lockstep::cosh(*this); }
Tensor Tensor::isnan() const { return lockstep::isnan(*this); }
Tensor Tensor::isinf() const { return lockstep::isinf(*this); }
Tensor Tensor::isfinite() const { return lockstep::isfinite(*this); }
Tensor Tensor::atan2(const Tensor& o) const { return lockstep::atan2(*this, o); }
Tensor Tensor::fmod(const Tensor& o) const { return lockstep::fmod(*this, o); }
Tensor Tensor::fmod(double o) const { return lockstep::fmod(*this, o); }
Tensor Tensor::remainder(const Tensor& o) const { return lockstep::remainder(*this, o); }
Tensor Tensor::remainder(double o) const { return lockstep::remainder(*this, o); }
Tensor Tensor::clamp_min(double m) const { return lockstep::clamp_min(*this, m); }
Tensor Tensor::clamp_max(double m) const { return lockstep::clamp_max(*this, m); }
Tensor Tensor::log() const { return lockstep::log(*this); }
Tensor Tensor::sqrt() const { return lockstep::sqrt(*this); }
Tensor Tensor::rsqrt() const { return lockstep::rsqrt(*this); }
Tensor Tensor::sin() const { return lockstep::sin(*this); }
Tensor Tensor::cos() const { return lockstep::cos(*this); }
Tensor Tensor::tanh() const { return lockstep::tanh(*this); }
Tensor Tensor::sigmoid() const { return lockstep::sigmoid(*this); }
Tensor Tensor::pow(double e) const { return lockstep::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return lockstep::pow(*this, e); }
Tensor Tensor::square() const { return lockstep::square(*this); }
Tensor Tensor::clamp(std::optional<double> lo, std::optional<double> hi) const { return lockstep::clamp(*this, lo, hi); }
Tensor Tensor::masked_fill(const Tensor& m, double v) const { return lockstep::masked_fill(*this, m, v); }
Tensor Tensor::logical_not() const { return lockstep::logical_not(*this); }
Tensor Tensor::tril(int64_t k) const { return lockstep::tril(*this, k); }
Tensor Tensor::triu(int64_t k) const { return lockstep::triu(*this, k); }
Tensor Tensor::eq(const Tensor& o) const { return lockstep::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return lockstep::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return lockstep::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return lockstep::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return lockstep::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return lockstep::ge(*this, o); }
Tensor Tensor::eq(double o) const { return *this == o; }
Tensor Tensor::ne(double o) const { return *this != o; }
Tensor Tensor::lt(double o) const { return *this < o; }
Tensor Tensor::le(double o) const { return *this <= o; }
Tensor Tensor::gt(double o) const { return *this > o; }
Tensor Tensor::ge(double o) const { return *this >= o; }

Tensor Tensor::sum() const { return lockstep::sum(*this); }
Tensor Tensor::sum(int64_t d, bool k) const { return lockstep::sum(*this, d, k); }
Tensor Tensor::sum(const std::vector<int64_t>& d, bool k) const { return lockstep::sum(*this, d, k); }
Tensor Tensor::mean() const { return lockstep::mean(*this); }
Tensor Tensor::mean(int64_t d, bool k) const { return lockstep::mean(*this, d, k); }
Tensor Tensor::mean(const std::vector<int64_t>& d, bool k) const { return lockstep::mean(*this, d, k); }
Tensor Tensor::prod() const { return lockstep::prod(*this); }
Tensor Tensor::prod(int64_t d, bool k) const { return lockstep::prod(*this, d, k); }
Tensor Tensor::var(const std::vector<int64_t>& d, bool u, bool k) const { return lockstep::var(*this, d, u, k); }
Tensor Tensor::std(const std::vector<int64_t>& d, bool u, bool k) const { return lockstep::std(*this, d, u, k); }
Tensor Tensor::max() const { return lockstep::max(*this); }
Tensor Tensor::min() const { return lockstep::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t d, bool k) const { return lockstep::max(*this, d, k); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t d, bool k) const { return lockstep::min(*this, d, k); }
Tensor Tensor::amax(const std::vector<int64_t>& d, bool k) const { return lockstep::amax(*this, d, k); }
Tensor Tensor::amin(const std::vector<int64_t>& d, bool k) const { return lockstep::amin(*this, d, k); }
Tensor Tensor::argmax(int64_t d, bool k) const { return lockstep::argmax(*this, d, k); }
Tensor Tensor::argmin(int64_t d, bool k) const { return lockstep::argmin(*this, d, k); }
Tensor Tensor::logsumexp(const std::vector<int64_t>& d, bool k) const { return lockstep::logsumexp(*this, d, k); }
Tensor Tensor::norm(double p, const std::vector<int64_t>& d, bool k) const { return lockstep::norm(*this, p, d, k); }
Tensor Tensor::softmax(int64_t d) const { return lockstep::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return lockstep::log_softmax(*this, d); }
Tensor Tensor::cumsum(int64_t d, std::optional<Dtype> t) const { return lockstep::cumsum(*this, d, t); }
Tensor Tensor::cumprod(int64_t d, std::optional<Dtype> t) const { return lockstep::cumprod(*this, d, t); }
Tensor Tensor::logcumsumexp(int64_t d) const { return lockstep::logcumsumexp(*this, d); }
std::tuple<Tensor, Tensor> Tensor::cummax(int64_t d) const { return lockstep::cummax(*this, d); }
std::tuple<Tensor, Tensor> Tensor::cummin(int64_t d) const { return lockstep::cummin(*this, d); }
Tensor Tensor::matmul(const Tensor& o) const { return lockstep::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const {
  LOCKSTEP_CHECK(dim() == 2 && o.defined() && o.dim() == 2, "mm: expected two 2-D tensors, got ", shape(), " and ",
                 o.defined() ? o.shape() : Shape{});
  return lockstep::matmul(*this, o);
}
Tensor Tensor::all() const { return lockstep::eq(lockstep::sum(lockstep::ne(*this, zeros({}, {dtype(), device()}))),
                                                  full({}, static_cast<double>(numel()), {kInt64, device()})); }
Tensor Tensor::any() const { return lockstep::ne(lockstep::sum(lockstep::ne(*this, zeros({}, {dtype(), device()}))),
                                                  zeros({}, {kInt64, device()})); }

// Compositions (autograd/composite.cpp).
Tensor Tensor::flip(const std::vector<int64_t>& d) const { return lockstep::flip(*this, d); }
Tensor Tensor::roll(const std::vector<int64_t>& s, const std::vector<int64_t>& d) const { return lockstep::roll(*this, s, d); }
Tensor Tensor::roll(int64_t s, std::optional<int64_t> d) const { return lockstep::roll(*this, s, d); }
Tensor Tensor::repeat(const std::vector<int64_t>& s) const { return lockstep::repeat(*this, s); }
Tensor Tensor::repeat_interleave(int64_t r, std::optional<int64_t> d) const { return lockstep::repeat_interleave(*this, r, d); }
Tensor Tensor::repeat_interleave(const Tensor& r, std::optional<int64_t> d) const {
  return lockstep::repeat_interleave(*this, r, d);
}
Tensor Tensor::outer(const Tensor& o) const { return lockstep::outer(*this, o); }
Tensor Tensor::cross(const Tensor& o, std::optional<int64_t> d) const { return lockstep::cross(*this, o, d); }
Tensor Tensor::bmm(const Tensor& o) const { return lockstep::bmm(*this, o); }
Tensor Tensor::addmm(const Tensor& m1, const Tensor& m2, double beta, double alpha) const {
  return lockstep::addmm(*this, m1, m2, beta, alpha);
}
Tensor Tensor::baddbmm(const Tensor& b1, const Tensor& b2, double beta, double alpha) const {
  return lockstep::baddbmm(*this, b1, b2, beta, alpha);
}
Tensor Tensor::lerp(const Tensor& e, double w) const { return lockstep::lerp(*this, e, w); }
Tensor Tensor::lerp(const Tensor& e, const Tensor& w) const { return lockstep::lerp(*this, e, w); }

// Scatters and value-sized selections (autograd/scatter_ops.cpp, selection_ops.cpp, clamp_tensor.cpp);
// the in-place scatter_, scatter_reduce_ and index_put_ are in scatter_ops.cpp.
Tensor Tensor::scatter(int64_t d, const Tensor& i, const Tensor& s) const { return lockstep::scatter(*this, d, i, s); }
Tensor Tensor::scatter(int64_t d, const Tensor& i, double v) const { return lockstep::scatter(*this, d, i, v); }
Tensor Tensor::scatter_add(int64_t d, const Tensor& i, const Tensor& s) const {
  return lockstep::scatter_add(*this, d, i, s);
}
Tensor Tensor::scatter_reduce(int64_t d, const Tensor& i, const Tensor& s, const std::string& r, bool self) const {
  return lockstep::scatter_reduce(*this, d, i, s, r, self);
}
Tensor Tensor::index_put(const std::vector<Tensor>& i, const Tensor& v, bool acc) const {
  return lockstep::index_put(*this, i, v, acc);
}
Tensor Tensor::nonzero() const { return lockstep::nonzero(*this); }
Tensor Tensor::argwhere() const { return lockstep::argwhere(*this); }
Tensor Tensor::masked_select(const Tensor& m) const { return lockstep::masked_select(*this, m); }
Tensor Tensor::masked_scatter(const Tensor& m, const Tensor& s) const { return lockstep::masked_scatter(*this, m, s); }
Tensor Tensor::bincount(const Tensor& w, int64_t n) const { return lockstep::bincount(*this, w, n); }
Tensor Tensor::histc(int64_t bins, double lo, double hi) const { return lockstep::histc(*this, bins, lo, hi); }
Tensor Tensor::clamp_min(const Tensor& m) const { return lockstep::clamp_min(*this, m); }
Tensor Tensor::clamp_max(const Tensor& m) const { return lockstep::clamp_max(*this, m); }

// x.index({...}) as LibTorch's: integers select (dropping the dimension), slices narrow, None adds a
// dimension, Ellipsis stands for the full slices left over, an int64 tensor picks with index_select.
Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  int64_t consumed = 0, ellipses = 0;
  for (const TensorIndex& i : indices) {
    if (i.kind == TensorIndex::Kind::Ellipsis) ++ellipses;
    else if (i.kind != TensorIndex::Kind::None) ++consumed;
  }
  LOCKSTEP_CHECK(ellipses <= 1, "index: at most one Ellipsis, got ", ellipses);
  LOCKSTEP_CHECK(consumed <= dim(), "index: ", consumed, " indices for a tensor of shape ", shape());
  Tensor r = *this;
  int64_t d = 0;  // the dimension of r the next index applies to
  for (const TensorIndex& i : indices) {
    switch (i.kind) {
      case TensorIndex::Kind::Integer: r = lockstep::select(r, d, i.integer); break;
      case TensorIndex::Kind::Slice: {
        const Slice& s = i.slice;
        r = lockstep::slice(r, d, s.start.value_or(0), s.stop.value_or(INT64_MAX), s.step);
        ++d;
        break;
      }
      case TensorIndex::Kind::None: r = lockstep::unsqueeze(r, d++); break;
      case TensorIndex::Kind::Ellipsis: d += dim() - consumed; break;
      case TensorIndex::Kind::Tensor: {
        LOCKSTEP_CHECK(i.tensor.defined() && i.tensor.dtype() == kInt64 && i.tensor.dim() <= 1,
                       "index: a tensor index must be 1-D int64, got ",
                       i.tensor.defined() ? shape_str(i.tensor.shape()) + " " + dtype_name(i.tensor.dtype())
                                          : std::string("an undefined tensor"));
        r = lockstep::index_select(r, d++, i.tensor);
        break;
      }
    }
  }
  return r;
}

}  // namespace lockstep
