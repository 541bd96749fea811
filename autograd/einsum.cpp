// torch.einsum, computed as PyTorch computes it (aten/src/ATen/native/Linear.cpp, without opt_einsum's
// path): the equation parsed into subscripts; every operand brought to one dimension order (the output's
// subscripts, then those summed over), its repeated subscripts reduced to diagonals and its missing ones
// unsqueezed; then the operands contracted two at a time from the left, each pair one batched matmul of
// permuted, reshaped views. Built from differentiable views, sum and matmul, so the gradient is theirs
// (and runs the same products transposed). Errors are PyTorch's words, with the equation and shapes.
#include <algorithm>
#include <deque>
#include <initializer_list>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "tensor/ops.h"

namespace lockstep {

namespace in = internal;

namespace {

// Subscripts A-Z are labels 0-25 and a-z 26-51, so the implicit output lists upper case first, as
// PyTorch's (and NumPy's) sorted order does.
constexpr int kLetters = 26;
constexpr int kLabels = 2 * kLetters;
constexpr int kEllipsis = kLabels;

bool is_subscript(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
int label_of(char c) { return c <= 'Z' ? c - 'A' : c - 'a' + kLetters; }
char char_of(int label) { return static_cast<char>(label < kLetters ? 'A' + label : 'a' + label - kLetters); }

// x's diagonal over dimensions d0 < d1 (of one size), kept at d0, d1 dropped: PyTorch's
// x.diagonal(0, d0, d1).movedim(-1, d0), as a strided window on x's row-major elements.
Tensor diagonal_at(const Tensor& x, int64_t d0, int64_t d1) {
  Shape shape = x.shape();
  Strides strides = in::contiguous_strides(shape);
  strides[d0] += strides[d1];
  strides.erase(strides.begin() + d1);
  shape.erase(shape.begin() + d1);
  return as_strided(x, shape, strides, 0);
}

std::vector<int64_t> joined(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// left * right summed over sum_dims (kept as size 1), both of one rank, a size of 1 in either
// broadcasting. Dimensions kept and in both are the batch (lro), those only in left the rows (lo), only
// in right the columns (ro): left [lro, lo, sum] @ right [lro, sum, ro], permuted back.
Tensor sum_product_pair(Tensor left, Tensor right, const std::vector<int64_t>& sum_dims) {
  if (sum_dims.empty()) return mul(left, right);
  const int64_t n = left.dim();
  std::vector<bool> summed(n, false);
  for (int64_t d : sum_dims) summed[d] = true;
  std::vector<int64_t> lro, lo, ro;
  int64_t lro_size = 1, lo_size = 1, ro_size = 1, sum_size = 1;
  for (int64_t i = 0; i < n; ++i) {
    const bool sl = left.size(i) != 1, sr = right.size(i) != 1;
    if (summed[i]) {
      if (sl && sr) sum_size *= left.size(i);  // equal: einsum checked the subscript's sizes
      else if (sl) left = sum(left, i, true);  // in one operand only: summed before the product
      else if (sr) right = sum(right, i, true);
    } else if (sl && sr) {
      lro.push_back(i);
      lro_size *= left.size(i);
    } else if (sl) {
      lo.push_back(i);
      lo_size *= left.size(i);
    } else {
      ro.push_back(i);
      ro_size *= right.size(i);
    }
  }
  // The product [lro, lo, ro] seen as the operands' rank (1 for the summed dimensions), then permuted back.
  Shape out_size;
  for (int64_t d : lro) out_size.push_back(left.size(d));
  for (int64_t d : lo) out_size.push_back(left.size(d));
  out_size.insert(out_size.end(), sum_dims.size(), 1);
  for (int64_t d : ro) out_size.push_back(right.size(d));
  const std::vector<int64_t> order = joined({&lro, &lo, &sum_dims, &ro});
  std::vector<int64_t> back(n);
  for (int64_t i = 0; i < n; ++i) back[order[i]] = i;
  left = reshape(permute(left, order), {lro_size, lo_size, sum_size});
  right = reshape(permute(right, joined({&lro, &sum_dims, &ro, &lo})), {lro_size, sum_size, ro_size});
  return permute(view(matmul(left, right), out_size), back);
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  LOCKSTEP_CHECK(!operands.empty(), "einsum(): must provide at least one operand");
  for (const Tensor& op : operands) in::check_defined(op, "einsum");
  const int64_t num_ops = static_cast<int64_t>(operands.size());
  const std::string context = " (equation \"" + equation + "\")";

  // Each operand's labels, kEllipsis standing for "...".
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::vector<int>> op_labels(num_ops);
  bool ellipsis_seen = false;  // in the current operand
  int64_t cur = 0;
  for (size_t i = 0; i < lhs.size(); ++i) {
    const char c = lhs[i];
    if (c == ' ') continue;
    if (c == '.') {
      LOCKSTEP_CHECK(!ellipsis_seen, "einsum(): found '.' for operand ", cur,
                     " for which an ellipsis was already found", context);
      LOCKSTEP_CHECK(i + 2 < lhs.size() && lhs[++i] == '.' && lhs[++i] == '.', "einsum(): found '.' for operand ",
                     cur, " that is not part of any ellipsis", context);
      op_labels[cur].push_back(kEllipsis);
      ellipsis_seen = true;
    } else if (c == ',') {
      LOCKSTEP_CHECK(++cur < num_ops, "einsum(): fewer operands were provided than specified in the equation",
                     context);
      ellipsis_seen = false;
    } else {
      LOCKSTEP_CHECK(is_subscript(c), "einsum(): invalid subscript given at index ", i,
                     " in the equation string, subscripts must be in [a-zA-Z]", context);
      op_labels[cur].push_back(label_of(c));
    }
  }
  LOCKSTEP_CHECK(cur == num_ops - 1, "einsum(): more operands were provided than specified in the equation",
                 context);

  // How many operands use each label, and how many dimensions "..." stands for (the most of any operand).
  std::vector<int64_t> label_count(kLabels, 0);
  int64_t ell_num_dim = 0;
  for (int64_t i = 0; i < num_ops; ++i) {
    const int64_t ndims = operands[i].dim();
    int64_t nlabels = static_cast<int64_t>(op_labels[i].size());
    bool has_ellipsis = false;
    for (int label : op_labels[i]) {
      if (label == kEllipsis) {
        --nlabels;
        has_ellipsis = true;
        ell_num_dim = std::max(ell_num_dim, ndims - nlabels);
      } else {
        ++label_count[label];
      }
    }
    LOCKSTEP_CHECK(has_ellipsis ? nlabels <= ndims : nlabels == ndims, "einsum(): the number of subscripts in the ",
                   "equation (", nlabels, ") ", has_ellipsis ? "is more than" : "does not match",
                   " the number of dimensions (", ndims, ") for operand ", i,
                   has_ellipsis ? "" : " and no ellipsis was given", context, ": operand ", i, " has shape ",
                   operands[i].shape());
  }

  // Every operand is permuted to [output dimensions, summed dimensions]; label_perm_index is each label's
  // place there, ell_index that of the first "..." dimension.
  std::vector<int64_t> label_perm_index(kLabels, -1);
  int64_t perm_index = 0, ell_index = 0;
  bool ell_in_output = false;
  if (arrow == std::string::npos) {  // implicit output: "...", then the labels used once, sorted
    perm_index = ell_num_dim;
    ell_in_output = true;
    for (int label = 0; label < kLabels; ++label)
      if (label_count[label] == 1) label_perm_index[label] = perm_index++;
  } else {
    const std::string rhs = equation.substr(arrow + 2);
    for (size_t i = 0; i < rhs.size(); ++i) {
      const char c = rhs[i];
      if (c == ' ') continue;
      if (c == '.') {
        LOCKSTEP_CHECK(!ell_in_output, "einsum(): found '.' for output but an ellipsis (...) was already found",
                       context);
        LOCKSTEP_CHECK(i + 2 < rhs.size() && rhs[++i] == '.' && rhs[++i] == '.',
                       "einsum(): found '.' for output that is not part of any ellipsis (...)", context);
        ell_index = perm_index;
        perm_index += ell_num_dim;
        ell_in_output = true;
      } else {
        LOCKSTEP_CHECK(is_subscript(c), "einsum(): invalid subscript given at index ", lhs.size() + 2 + i,
                       " in the equation string, subscripts must be in [a-zA-Z]", context);
        const int label = label_of(c);
        LOCKSTEP_CHECK(label_count[label] > 0 && label_perm_index[label] == -1, "einsum(): output subscript ", c,
                       label_perm_index[label] > -1 ? " appears more than once in the output"
                                                    : " does not appear in the equation for any input operand",
                       context);
        label_perm_index[label] = perm_index++;
      }
    }
  }
  const int64_t out_num_dim = perm_index;
  if (!ell_in_output) {  // "..." left out of an explicit output is summed over
    ell_index = perm_index;
    perm_index += ell_num_dim;
  }
  for (int label = 0; label < kLabels; ++label)
    if (label_count[label] > 0 && label_perm_index[label] == -1) label_perm_index[label] = perm_index++;

  // Sizes checked (1 broadcasts), diagonals taken for repeated labels, missing labels unsqueezed, each
  // operand permuted. dim_counts: how many operands have each dimension with a size other than 1.
  std::vector<int64_t> label_size(kLabels, 1), ell_sizes(ell_num_dim, 1), dim_counts(perm_index, 0);
  std::deque<Tensor> ops;
  for (int64_t i = 0; i < num_ops; ++i) {
    Tensor op = operands[i];
    std::vector<int64_t> permutation(perm_index, -1);
    int64_t dim = 0;
    for (int s : op_labels[i]) {
      if (s == kEllipsis) {
        const int64_t ndim = operands[i].dim() - (static_cast<int64_t>(op_labels[i].size()) - 1);
        for (int64_t j = ell_num_dim - ndim; j < ell_num_dim; ++j) {
          if (op.size(dim) != 1) {
            LOCKSTEP_CHECK(ell_sizes[j] == 1 || ell_sizes[j] == op.size(dim), "einsum(): dimension ", dim,
                           " covered by ellipsis in operand ", i, " has size ", op.size(dim),
                           " which does not broadcast with previously seen ellipsis with size ", ell_sizes[j],
                           " for the respective dimension", context);
            ell_sizes[j] = op.size(dim);
            ++dim_counts[ell_index + j];
          }
          permutation[ell_index + j] = dim++;
        }
      } else if (permutation[label_perm_index[s]] == -1) {
        if (op.size(dim) != 1) {
          LOCKSTEP_CHECK(label_size[s] == 1 || label_size[s] == op.size(dim), "einsum(): subscript ", char_of(s),
                         " has size ", op.size(dim), " for operand ", i,
                         " which does not broadcast with previously seen size ", label_size[s], context);
          label_size[s] = op.size(dim);
          ++dim_counts[label_perm_index[s]];
        }
        permutation[label_perm_index[s]] = dim++;
      } else {
        const int64_t prev = permutation[label_perm_index[s]];
        LOCKSTEP_CHECK(op.size(dim) == op.size(prev), "einsum(): subscript ", char_of(s), " is repeated for operand ",
                       i, " but the sizes don't match, ", op.size(dim), " != ", op.size(prev), context);
        op = diagonal_at(op, prev, dim);
      }
    }
    for (int64_t& d : permutation) {
      if (d == -1) {
        op = unsqueeze(op, dim);
        d = dim++;
      }
    }
    ops.push_back(permute(op, permutation));
  }

  // Left to right: a dimension summed over goes with the pair that last uses it (dim_counts reaching 1),
  // or is summed alone when only one operand of the pair has it and no later operand does.
  while (ops.size() > 1) {
    Tensor a = ops[0], b = ops[1];
    ops.pop_front();
    ops.pop_front();
    std::vector<int64_t> sum_dims, a_dims_to_sum, b_dims_to_sum;
    for (int64_t dim = out_num_dim; dim < perm_index; ++dim) {
      if (a.size(dim) != 1 && b.size(dim) != 1) {
        if (--dim_counts[dim] == 1) {
          sum_dims.push_back(dim);
          dim_counts[dim] = 0;
        }
      } else if (dim_counts[dim] == 1) {
        if (a.size(dim) != 1) {
          a_dims_to_sum.push_back(dim);
          dim_counts[dim] = 0;
        } else if (b.size(dim) != 1) {
          b_dims_to_sum.push_back(dim);
          dim_counts[dim] = 0;
        }
      }
    }
    if (!a_dims_to_sum.empty()) a = sum(a, a_dims_to_sum, true);
    if (!b_dims_to_sum.empty()) b = sum(b, b_dims_to_sum, true);
    ops.push_front(sum_product_pair(a, b, sum_dims));
  }

  Tensor result = ops[0];
  if (perm_index == out_num_dim) return result;
  if (num_ops > 1) {  // the summed dimensions are all of size 1 by now
    for (int64_t dim = perm_index - 1; dim >= out_num_dim; --dim) result = squeeze(result, dim);
    return result;
  }
  std::vector<int64_t> sum_dims;
  for (int64_t dim = out_num_dim; dim < perm_index; ++dim) sum_dims.push_back(dim);
  return sum(result, sum_dims);
}

}  // namespace lockstep
