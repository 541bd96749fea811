// Views: tensors that share another tensor's storage with their own shape, strides and offset. None
// copies data except reshape and contiguous, and those only when no view can express the result.
#include <algorithm>

#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// The strides that view `a` (shape a.shape(), strides a.strides()) as `shape` without copying, or
// nullopt when the layout cannot be expressed (PyTorch's computeStride): each run of `a`'s dimensions
// that is contiguous within itself may be split or merged freely.
std::optional<Strides> view_strides(const Tensor& a, const Shape& shape) {
  const Shape& old_shape = a.shape();
  const Strides& old_strides = a.strides();
  Strides out(shape.size());
  if (a.numel() == 0 || a.dim() == 0) return contiguous_strides(shape);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    // A chunk ends where the next-outer dimension does not continue this one contiguously.
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// `shape` with one -1 resolved against numel; checks the element count.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      LOCKSTEP_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape);
      infer = static_cast<int64_t>(i);
    } else {
      LOCKSTEP_CHECK(s[i] >= 0, op, ": invalid dimension ", s[i], " in ", shape);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    LOCKSTEP_CHECK(known > 0 && numel % known == 0, op, ": cannot reshape ", from, " into ", shape);
    s[infer] = numel / known;
    known *= s[infer];
  }
  LOCKSTEP_CHECK(known == numel, op, ": cannot reshape ", from, " (", numel, " elements) into ", shape);
  return s;
}

}  // namespace

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return s;
}

Tensor as_strided(const Tensor& a, const Shape& shape, const Strides& strides, int64_t storage_offset) {
  check_defined(a, "as_strided");
  LOCKSTEP_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape, " and strides ", strides,
                 " differ in length");
  int64_t n = 1, last = storage_offset;
  for (size_t d = 0; d < shape.size(); ++d) {
    LOCKSTEP_CHECK(shape[d] >= 0 && strides[d] >= 0, "as_strided: negative size or stride in ", shape, " / ", strides);
    n *= shape[d];
    if (shape[d] > 0) last += (shape[d] - 1) * strides[d];
  }
  const int64_t capacity = static_cast<int64_t>(a.storage()->nbytes() / element_size(a.dtype()));
  LOCKSTEP_CHECK(storage_offset >= 0 && (n == 0 || last < capacity), "as_strided: shape ", shape, " strides ", strides,
                 " at offset ", storage_offset, " reaches outside a storage of ", capacity, " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = a.storage();
  impl->offset = storage_offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->numel = n;
  impl->dtype = a.dtype();
  return Tensor(std::move(impl));
}

Tensor view(const Tensor& a, const Shape& shape) {
  check_defined(a, "view");
  Shape s = infer_shape(shape, a.numel(), "view", a.shape());
  auto strides = view_strides(a, s);
  LOCKSTEP_CHECK(strides.has_value(), "view: a tensor of shape ", a.shape(), " and strides ", a.strides(),
                 " cannot be viewed as ", s, " without a copy; use reshape (or contiguous().view)");
  return as_strided(a, s, *strides, a.storage_offset());
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  check_defined(a, "reshape");
  Shape s = infer_shape(shape, a.numel(), "reshape", a.shape());
  if (auto strides = view_strides(a, s)) return as_strided(a, s, *strides, a.storage_offset());
  Tensor c = clone(a);
  return as_strided(c, s, contiguous_strides(s), 0);
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  check_defined(a, "transpose");
  int64_t n = std::max<int64_t>(a.dim(), 1);
  d0 = wrap_dim(d0, n, "transpose");
  d1 = wrap_dim(d1, n, "transpose");
  if (a.dim() == 0) return as_strided(a, a.shape(), a.strides(), a.storage_offset());
  Shape s = a.shape();
  Strides st = a.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return as_strided(a, s, st, a.storage_offset());
}

Tensor transpose(const Tensor& a) {
  check_defined(a, "t");
  LOCKSTEP_CHECK(a.dim() <= 2, "t: expected a tensor of at most 2 dimensions, got ", a.shape(),
                 " (use transpose(dim0, dim1))");
  return a.dim() < 2 ? as_strided(a, a.shape(), a.strides(), a.storage_offset()) : transpose(a, 0, 1);
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  check_defined(a, "permute");
  LOCKSTEP_CHECK(static_cast<int64_t>(dims.size()) == a.dim(), "permute: ", dims.size(), " dimensions ", dims,
                 " given for a tensor of shape ", a.shape());
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<bool> seen(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], a.dim(), "permute");
    LOCKSTEP_CHECK(!seen[d], "permute: dimension ", dims[i], " repeats in ", dims);
    seen[d] = true;
    s[i] = a.shape()[d];
    st[i] = a.strides()[d];
  }
  return as_strided(a, s, st, a.storage_offset());
}

Tensor expand(const Tensor& a, const Shape& shape) {
  check_defined(a, "expand");
  LOCKSTEP_CHECK(shape.size() >= static_cast<size_t>(a.dim()), "expand: cannot expand ", a.shape(), " to ", shape,
                 " (fewer dimensions)");
  const size_t lead = shape.size() - a.dim();
  Shape s(shape.size());
  Strides st(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < lead) {
      LOCKSTEP_CHECK(shape[d] >= 0, "expand: size -1 is not allowed in a new leading dimension: ", shape);
      s[d] = shape[d];
      st[d] = 0;
      continue;
    }
    const int64_t have = a.shape()[d - lead];
    const int64_t want = shape[d] == -1 ? have : shape[d];
    LOCKSTEP_CHECK(have == want || have == 1, "expand: cannot expand ", a.shape(), " to ", shape, " (dimension ", d,
                   ": ", have, " vs ", want, ")");
    s[d] = want;
    st[d] = have == want ? a.strides()[d - lead] : 0;
  }
  return as_strided(a, s, st, a.storage_offset());
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined(a, "slice");
  const int64_t d = wrap_dim(dim, a.dim(), "slice");
  LOCKSTEP_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = a.shape()[d];
  // Python's clamping: negative positions count from the end; out-of-range ones clamp.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = a.shape();
  Strides st = a.strides();
  s[d] = (end - start + step - 1) / step;
  st[d] = a.strides()[d] * step;
  return as_strided(a, s, st, a.storage_offset() + start * a.strides()[d]);
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  check_defined(a, "narrow");
  const int64_t d = wrap_dim(dim, a.dim(), "narrow");
  const int64_t n = a.shape()[d];
  if (start < 0) start += n;
  LOCKSTEP_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: [", start, ", ", start + length,
                 ") is outside dimension ", dim, " of size ", n, " (shape ", a.shape(), ")");
  return slice(a, d, start, start + length);
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  check_defined(a, "select");
  const int64_t d = wrap_dim(dim, a.dim(), "select");
  const int64_t n = a.shape()[d];
  LOCKSTEP_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ", dim,
                 " of size ", n, " (shape ", a.shape(), ")");
  if (index < 0) index += n;
  Shape s = a.shape();
  Strides st = a.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(a, s, st, a.storage_offset() + index * a.strides()[d]);
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  check_defined(a, "unsqueeze");
  const int64_t d = wrap_dim(dim, a.dim() + 1, "unsqueeze");
  Shape s = a.shape();
  Strides st = a.strides();
  const int64_t stride = d < a.dim() ? a.strides()[d] * a.shape()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return as_strided(a, s, st, a.storage_offset());
}

Tensor squeeze(const Tensor& a, int64_t dim) {
  check_defined(a, "squeeze");
  if (a.dim() == 0) return as_strided(a, a.shape(), a.strides(), a.storage_offset());
  const int64_t d = wrap_dim(dim, a.dim(), "squeeze");
  if (a.shape()[d] != 1) return as_strided(a, a.shape(), a.strides(), a.storage_offset());
  Shape s = a.shape();
  Strides st = a.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(a, s, st, a.storage_offset());
}

Tensor squeeze(const Tensor& a) {
  check_defined(a, "squeeze");
  Shape s;
  Strides st;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.shape()[d] != 1) {
      s.push_back(a.shape()[d]);
      st.push_back(a.strides()[d]);
    }
  return as_strided(a, s, st, a.storage_offset());
}

Tensor view_range(const Tensor& base, int64_t offset, const Shape& shape) {
  check_defined(base, "view_range");
  LOCKSTEP_CHECK(base.is_contiguous(), "view_range: the base tensor must be contiguous, got strides ",
                 base.strides());
  const int64_t n = numel_of(shape);
  LOCKSTEP_CHECK(offset >= 0 && n >= 0 && offset + n <= base.numel(), "view_range: elements [", offset, ", ",
                 offset + n, ") are outside a tensor of ", base.numel(), " elements");
  return as_strided(base, shape, contiguous_strides(shape), base.storage_offset() + offset);
}

Tensor contiguous(const Tensor& a) {
  check_defined(a, "contiguous");
  return a.is_contiguous() ? a : clone(a);
}

}  // namespace lockstep::internal
