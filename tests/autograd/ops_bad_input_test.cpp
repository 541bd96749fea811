// Bad input to the ops of autograd/functions.h and Tensor's methods: mismatched shapes, dimensions and
// indices out of range, wrong dtypes, undefined tensors and (where a device is visible, e.g. under
// --config=cudaemu) tensors on different devices. Each must throw lockstep::Error whose message names the
// op and the offending operands, as PyTorch's errors do: never a crash, a silent broadcast or a wrong result.
#include <doctest/doctest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "autograd/api.h"
#include "tensor/cuda/cuda.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;

using lockstep::testing::expect_error;

Tensor r(const Shape& s) { return randn(s); }
Tensor idx(std::vector<int64_t> v) { return tensor(v); }

}  // namespace

TEST_CASE("elementwise ops: shapes that do not broadcast, wrong dtypes, undefined tensors") {
  const Tensor a = r({3, 4}), b = r({5});
  expect_error("add", [&] { add(a, b); }, {"add", "[3, 4]", "[5]"});
  expect_error("a + b", [&] { (void)(a + b); }, {"add", "[3, 4]", "[5]"});
  expect_error("sub", [&] { sub(r({2, 3}), r({3, 2})); }, {"sub", "[2, 3]", "[3, 2]"});
  expect_error("mul", [&] { mul(a, r({4, 1, 2})); }, {"mul", "[3, 4]", "[4, 1, 2]"});
  expect_error("div", [&] { div(a, r({3})); }, {"div", "[3, 4]", "[3]"});
  expect_error("pow", [&] { pow(a, r({2, 4})); }, {"pow", "[3, 4]", "[2, 4]"});
  expect_error("maximum", [&] { maximum(a, b); }, {"maximum", "[3, 4]", "[5]"});
  expect_error("minimum", [&] { minimum(a, b); }, {"minimum", "[3, 4]", "[5]"});
  expect_error("lt", [&] { lt(a, b); }, {"lt", "[3, 4]", "[5]"});
  expect_error("eq", [&] { (void)(a == b); }, {"eq", "[3, 4]", "[5]"});
  expect_error("logical_and", [&] { logical_and(a > 0.0, b > 0.0); }, {"logical_and", "[3, 4]", "[5]"});
  expect_error("clamp without bounds", [&] { clamp(a, std::nullopt, std::nullopt); }, {"clamp"});
  expect_error("gelu approximate", [&] { gelu(a, "fast"); }, {"gelu", "fast"});
  expect_error("where shapes", [&] { where(a > 0.0, a, b); }, {"where", "[3, 4]", "[5]"});
  expect_error("where condition dtype", [&] { where(a, a, a); }, {"where", "bool", "float32"});
  expect_error("masked_fill mask dtype", [&] { masked_fill(a, a, 0.0); }, {"masked_fill", "bool", "float32"});
  expect_error("masked_fill mask shape", [&] { masked_fill(a, b > 0.0, 0.0); }, {"masked_fill", "[5]", "[3, 4]"});
  // masked_fill does not grow the tensor to the mask's shape (PyTorch refuses this too).
  expect_error("masked_fill mask larger", [&] { masked_fill(r({4}), r({3, 4}) > 0.0, 0.0); },
               {"masked_fill", "[3, 4]", "[4]"});
  expect_error("tril 1-D", [&] { tril(b); }, {"tril", "[5]"});
  expect_error("triu 1-D", [&] { triu(b); }, {"triu", "[5]"});
  expect_error("neg of bool", [&] { neg(a > 0.0); }, {"neg", "bool"});
  expect_error("sub of bools", [&] { sub(a > 0.0, a < 0.0); }, {"sub", "bool"});
  expect_error("add undefined", [&] { add(Tensor(), a); }, {"add", "undefined"});
  expect_error("exp undefined", [&] { exp(Tensor()); }, {"exp", "undefined"});
}

TEST_CASE("views: bad shapes and dimensions") {
  const Tensor a = r({2, 3});
  expect_error("reshape numel", [&] { reshape(a, {4, 2}); }, {"reshape", "[2, 3]", "[4, 2]"});
  expect_error("reshape two -1", [&] { reshape(a, {-1, -1}); }, {"reshape", "-1"});
  expect_error("view numel", [&] { view(a, {5}); }, {"view", "[2, 3]", "[5]"});
  expect_error("view of a transposed tensor", [&] { view(r({2, 3, 4}).transpose(0, 1), {6, 4}); },
               {"view", "[3, 2, 4]", "reshape"});
  expect_error("t of 3-D", [&] { r({2, 3, 4}).t(); }, {"t", "[2, 3, 4]"});
  expect_error("transpose dim", [&] { transpose(a, 0, 2); }, {"transpose", "2"});
  expect_error("permute count", [&] { permute(a, {0}); }, {"permute", "[0]"});
  expect_error("permute repeat", [&] { permute(a, {1, 1}); }, {"permute", "[1, 1]"});
  expect_error("expand", [&] { expand(r({3, 2}), {3, 4}); }, {"expand", "[3, 2]", "[3, 4]"});
  expect_error("expand fewer dims", [&] { expand(r({2, 3, 1}), {3, 4}); }, {"expand", "[2, 3, 1]", "[3, 4]"});
  expect_error("slice dim", [&] { slice(a, 2, 0, 1); }, {"slice", "2"});
  expect_error("slice step", [&] { slice(a, 1, 0, 3, 0); }, {"slice", "step"});
  expect_error("narrow range", [&] { narrow(a, 1, 2, 2); }, {"narrow", "[2, 4)"});
  expect_error("select index", [&] { select(a, 0, 2); }, {"select", "2"});
  expect_error("select negative index", [&] { select(a, 1, -4); }, {"select", "-4"});
  expect_error("unsqueeze dim", [&] { unsqueeze(a, 3); }, {"unsqueeze", "3"});
  expect_error("squeeze dim", [&] { squeeze(a, -3); }, {"squeeze", "-3"});
  expect_error("flatten order", [&] { flatten(r({2, 3, 4}), 2, 1); }, {"flatten", "2", "1"});
  expect_error("flatten dim", [&] { flatten(a, 0, 5); }, {"flatten", "5"});
  expect_error("unflatten", [&] { a.unflatten(1, {2, 2}); }, {"unflatten", "[2, 2]", "3"});
  expect_error("as_strided past the end", [&] { as_strided(a, {2, 3}, {3, 2}); }, {"as_strided", "[2, 3]", "[3, 2]"});
  expect_error("as_strided rank", [&] { as_strided(a, {2, 3}, {1}); }, {"as_strided", "[2, 3]", "[1]"});
  expect_error("as_strided offset", [&] { as_strided(a, {2}, {1}, 5); }, {"as_strided", "5"});
  expect_error("unfold size", [&] { unfold(a, 1, 4, 1); }, {"unfold", "4", "3"});
  expect_error("unfold step", [&] { unfold(a, 1, 2, 0); }, {"unfold", "step"});
  expect_error("unfold dim", [&] { unfold(a, 2, 1, 1); }, {"unfold", "2"});
  expect_error("index too many", [&] { a.index({0, 1, 2}); }, {"index", "[2, 3]"});
  expect_error("index out of range", [&] { a.index({Slice(), 3}); }, {"index", "3"});
  expect_error("two ellipses", [&] { a.index({Ellipsis, Ellipsis}); }, {"index", "Ellipsis"});
  expect_error("index with float tensor", [&] { a.index({r({2})}); }, {"index", "int64"});
  expect_error("index tensor value", [&] { a.index({idx({0, 2})}); }, {"index", "2"});
}

TEST_CASE("cat, stack, split, chunk: mismatched operands and bad dimensions") {
  const Tensor a = r({2, 3});
  expect_error("cat shapes", [&] { cat({a, r({2, 4})}, 0); }, {"cat", "[2, 3]", "[2, 4]"});
  expect_error("cat ranks", [&] { cat({a, r({3})}, 0); }, {"cat", "[2, 3]", "[3]"});
  expect_error("cat dim", [&] { cat({a, a}, 2); }, {"cat", "2"});
  expect_error("cat empty", [&] { cat({}, 0); }, {"cat"});
  CHECK(cat({a, a.to(kInt64)}, 0).dtype() == kFloat32);  // not an error: cat promotes, as PyTorch's does
  expect_error("stack shapes", [&] { stack({a, r({3, 2})}); }, {"stack", "[2, 3]", "[3, 2]"});
  expect_error("stack dim", [&] { stack({a, a}, 3); }, {"stack", "3"});
  expect_error("split sizes", [&] { split(r({3, 6}), std::vector<int64_t>{1, 2}, 1); }, {"split", "[1, 2]", "6"});
  expect_error("split size", [&] { split(a, 0, 1); }, {"split", "0"});
  expect_error("split dim", [&] { split(a, 1, 2); }, {"split", "2"});
  expect_error("chunk count", [&] { chunk(a, 0); }, {"chunk", "0"});
  expect_error("chunk dim", [&] { chunk(a, 2, -3); }, {"chunk", "-3"});
}

TEST_CASE("indexing: out-of-range indices, wrong index dtypes and shapes") {
  const Tensor a = r({4, 3});
  expect_error("index_select value", [&] { index_select(a, 0, idx({1, 4})); }, {"index_select", "4"});
  expect_error("index_select negative", [&] { index_select(a, 0, idx({-1})); }, {"index_select", "-1"});
  expect_error("index_select dtype", [&] { index_select(a, 0, r({2})); }, {"index_select", "int64", "float32"});
  expect_error("index_select dim", [&] { index_select(a, 2, idx({0})); }, {"index_select", "2"});
  expect_error("index_select 2-D index", [&] { index_select(a, 0, tensor({0L, 1L, 2L, 3L}, {2, 2})); },
               {"index_select", "[2, 2]"});
  const Tensor g = tensor({0L, 3L, 1L, 2L}, {2, 2});
  expect_error("gather value", [&] { gather(a, 1, g); }, {"gather", "3"});
  expect_error("gather dtype", [&] { gather(a, 1, r({2, 2})); }, {"gather", "int64"});
  expect_error("gather rank", [&] { gather(a, 1, idx({0, 1})); }, {"gather", "[2]", "[4, 3]"});
  expect_error("gather dim", [&] { gather(a, 2, g); }, {"gather", "2"});
  expect_error("scatter_add value", [&] { scatter_add(a, 1, g, r({2, 2})); }, {"scatter_add", "3"});
  expect_error("scatter_add source", [&] { scatter_add(a, 1, tensor({0L, 1L, 1L, 2L}, {2, 2}), r({2})); },
               {"scatter_add", "[2]", "[2, 2]"});
  expect_error("index_add value", [&] { index_add(a, 0, idx({0, 4}), r({2, 3})); }, {"index_add", "4"});
  expect_error("index_add source", [&] { index_add(a, 0, idx({0, 1}), r({2, 2})); }, {"index_add", "[2, 2]"});
  expect_error("index_add dtype", [&] { index_add(a, 0, r({2}), r({2, 3})); }, {"index_add", "int64"});
  expect_error("sort dim", [&] { sort(a, 2); }, {"sort", "2"});
  expect_error("argsort dim", [&] { argsort(a, -3); }, {"argsort", "-3"});
  expect_error("topk k", [&] { topk(a, 4); }, {"topk", "4"});
  expect_error("topk dim", [&] { topk(a, 1, 2); }, {"topk", "2"});
}

TEST_CASE("reductions: bad dimensions and dtypes") {
  const Tensor a = r({2, 3});
  expect_error("sum dim", [&] { sum(a, 2); }, {"sum", "2"});
  expect_error("sum dims", [&] { sum(a, {0, -3}); }, {"sum", "-3"});
  expect_error("sum repeated dims", [&] { sum(a, {1, -1}); }, {"sum", "repeated"});
  expect_error("mean dim", [&] { mean(a, 3, true); }, {"mean", "3"});
  expect_error("mean of int64", [&] { mean(arange(6)); }, {"mean", "int64"});
  expect_error("var dims", [&] { var(a, {2}); }, {"var", "2"});
  expect_error("var of int64", [&] { var(arange(6)); }, {"var", "int64"});
  expect_error("std dims", [&] { lockstep::std(a, {-3}); }, {"std", "-3"});
  expect_error("max dim", [&] { max(a, 2); }, {"max", "2"});
  expect_error("min dim", [&] { min(a, -3); }, {"min", "-3"});
  expect_error("max of empty", [&] { max(zeros({0})); }, {"max"});
  expect_error("amax dims", [&] { amax(a, {5}); }, {"amax", "5"});
  expect_error("amin dims", [&] { amin(a, {0, 0}); }, {"amin", "repeated"});
  expect_error("argmax dim", [&] { argmax(a, 2); }, {"argmax", "2"});
  expect_error("argmin dim", [&] { argmin(a, -3); }, {"argmin", "-3"});
  expect_error("logsumexp dims", [&] { logsumexp(a, {2}); }, {"logsumexp", "2"});
  expect_error("norm p", [&] { norm(a, -1.0); }, {"norm", "-1"});
  expect_error("norm dims", [&] { norm(a, 2, {4}); }, {"norm", "4"});
  expect_error("softmax dim", [&] { softmax(a, 2); }, {"softmax", "2"});
  expect_error("softmax of int64", [&] { softmax(arange(6), 0); }, {"softmax", "int64"});
  expect_error("log_softmax dim", [&] { log_softmax(a, -3); }, {"log_softmax", "-3"});
}

TEST_CASE("scans: dimensions out of range name the op and the shape; wrong dtypes") {
  const Tensor a = r({2, 3});
  expect_error("cumsum dim", [&] { cumsum(a, 2); }, {"cumsum", "dimension 2", "[2, 3]"});
  expect_error("cumsum method dim", [&] { a.cumsum(-3); }, {"cumsum", "dimension -3", "[2, 3]"});
  expect_error("cumprod dim", [&] { cumprod(a, -3); }, {"cumprod", "-3", "[2, 3]"});
  expect_error("logcumsumexp dim", [&] { logcumsumexp(a, 5); }, {"logcumsumexp", "5", "[2, 3]"});
  expect_error("cummax dim", [&] { cummax(a, 2); }, {"cummax", "2", "[2, 3]"});
  expect_error("cummin dim", [&] { cummin(a, -3); }, {"cummin", "-3", "[2, 3]"});
  expect_error("cumsum of a 0-D tensor, dim 1", [&] { cumsum(scalar_tensor(1.5), 1); },
               {"cumsum", "dimension 1", "[]"});
  expect_error("logcumsumexp of int64", [&] { logcumsumexp(arange(6), 0); }, {"logcumsumexp", "int64"});
  expect_error("cumsum undefined", [&] { cumsum(Tensor(), 0); }, {"cumsum", "undefined"});
}

TEST_CASE("matmul, linear and nll_loss: mismatched operands") {
  expect_error("matmul 2-D", [] { matmul(r({3, 4}), r({5, 2})); }, {"matmul", "[3, 4]", "[5, 2]"});
  expect_error("matmul 1-D", [] { matmul(r({3}), r({4})); }, {"matmul", "[3]", "[4]"});
  expect_error("matmul 1-D 2-D", [] { matmul(r({3}), r({4, 2})); }, {"matmul", "[3]", "[4, 2]"});
  expect_error("matmul batch", [] { matmul(r({2, 3, 4}), r({3, 4, 5})); }, {"matmul", "[2, 3, 4]", "[3, 4, 5]"});
  expect_error("matmul 0-D", [] { matmul(scalar_tensor(1.0), r({3})); }, {"matmul", "[]"});
  expect_error("matmul dtypes", [] { matmul(r({2, 3}), r({3, 2}).to(kFloat64)); }, {"matmul", "float32", "float64"});
  expect_error("matmul of int64", [] { matmul(arange(4).reshape({2, 2}), arange(4).reshape({2, 2})); },
               {"matmul", "int64"});
  expect_error("linear in features", [] { linear(r({2, 4}), r({5, 3})); }, {"linear", "[2, 4]", "[5, 3]"});
  expect_error("linear bias", [] { linear(r({2, 3}), r({5, 3}), r({4})); }, {"linear", "[4]", "5"});
  expect_error("linear weight rank", [] { linear(r({2, 3}), r({3})); }, {"linear", "[3]"});
  expect_error("linear dtypes", [] { linear(r({2, 3}).to(kFloat64), r({5, 3})); }, {"linear", "float64", "float32"});
  const Tensor logp = log_softmax(r({3, 5}), 1);
  expect_error("nll_loss class", [&] { nll_loss(logp, idx({0, 5, 1})); }, {"target 5", "out of range"});
  expect_error("nll_loss negative class", [&] { nll_loss(logp, idx({0, -1, 1})); }, {"target -1", "out of range"});
  expect_error("nll_loss target length", [&] { nll_loss(logp, idx({0, 1})); }, {"nll_loss", "[2]", "[3, 5]"});
  expect_error("nll_loss target dtype", [&] { nll_loss(logp, r({3})); }, {"nll_loss", "int64", "float32"});
  expect_error("nll_loss input rank", [&] { nll_loss(r({5}), idx({1})); }, {"nll_loss", "[5]"});
}

TEST_CASE("compositions and einsum: PyTorch's errors, with the op and the shapes") {
  const Tensor a = r({2, 3});
  // einsum: subscripts that do not match an operand's rank, sizes that do not agree, malformed equations.
  expect_error("einsum rank", [] { einsum("ij,jk->ik", {r({2, 3, 4}), r({4, 5})}); },
               {"einsum()", "number of subscripts in the equation (2) does not match the number of dimensions (3) "
                            "for operand 0 and no ellipsis was given", "[2, 3, 4]"});
  expect_error("einsum rank of the second operand", [&] { einsum("ij,jkl->ik", {a, r({3, 4})}); },
               {"einsum()", "(3)", "(2)", "operand 1"});
  expect_error("einsum rank with an ellipsis", [&] { einsum("...ijk", {a}); },
               {"einsum()", "number of subscripts in the equation (3) is more than the number of dimensions (2)"});
  expect_error("einsum sizes", [&] { einsum("ij,jk->ik", {a, r({4, 5})}); },
               {"einsum()", "subscript j has size 4 for operand 1 which does not broadcast with previously seen size 3"});
  expect_error("einsum diagonal sizes", [&] { einsum("ii", {a}); },
               {"einsum()", "subscript i is repeated for operand 0 but the sizes don't match, 3 != 2"});
  expect_error("einsum ellipsis sizes", [] { einsum("...i,...i", {r({2, 3}), r({4, 3})}); },
               {"einsum()", "covered by ellipsis", "size 4", "size 2"});
  expect_error("einsum output subscript", [&] { einsum("ij->ik", {a}); },
               {"einsum()", "output subscript k does not appear in the equation for any input operand"});
  expect_error("einsum output repeated", [&] { einsum("ij->ii", {a}); },
               {"einsum()", "output subscript i appears more than once in the output"});
  expect_error("einsum fewer operands", [&] { einsum("ij,jk->ik", {a}); }, {"einsum()", "fewer operands"});
  expect_error("einsum more operands", [&] { einsum("ij", {a, a}); }, {"einsum()", "more operands"});
  expect_error("einsum subscript", [&] { einsum("i1", {a}); }, {"einsum()", "invalid subscript given at index 1"});
  expect_error("einsum broken ellipsis", [&] { einsum("i..j", {a}); }, {"einsum()", "not part of any ellipsis"});
  expect_error("einsum two ellipses", [&] { einsum("...i...", {a}); }, {"einsum()", "ellipsis was already found"});
  expect_error("einsum no operands", [] { einsum("ij", {}); }, {"einsum()", "at least one operand"});
  // cross: the dimension must have size 3 in both.
  expect_error("cross dim of size 4", [] { cross(r({2, 4}), r({2, 4}), 1); },
               {"cross", "dimension 1 must have length 3. Got 4 and 4"});
  expect_error("cross sizes differ", [] { cross(r({2, 3}), r({2, 4}), -1); }, {"cross", "Got 3 and 4"});
  expect_error("cross without a dim of size 3", [] { cross(r({2, 4}), r({2, 4})); },
               {"cross", "no dimension of size 3", "[2, 4]"});
  expect_error("cross ranks", [] { cross(r({3}), r({2, 3})); }, {"cross", "same number of dimensions", "[2, 3]"});
  expect_error("cross dim", [&] { cross(a, a, 2); }, {"cross", "2"});
  // repeat: fewer sizes than dimensions, negative sizes.
  expect_error("repeat with fewer sizes than dims", [&] { a.repeat({2}); },
               {"repeat", "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor",
                "[2, 3]"});
  expect_error("repeat negative", [&] { repeat(a, {2, -1}); }, {"repeat", "negative dimension -1"});
  // one_hot: classes out of range, wrong dtype, nothing to infer the class count from.
  expect_error("one_hot class >= num_classes", [] { one_hot(idx({0, 3, 1}), 3); },
               {"one_hot", "Class values must be smaller than num_classes", "3"});
  expect_error("one_hot negative class", [] { one_hot(idx({0, -1})); }, {"one_hot", "non-negative", "-1"});
  expect_error("one_hot of float", [&] { one_hot(a); }, {"one_hot", "int64", "float32"});
  expect_error("one_hot of empty", [] { one_hot(zeros({0}, kInt64)); }, {"one_hot", "empty tensor"});
  // The rest.
  expect_error("flip repeated dim", [&] { flip(a, {0, -2}); }, {"flip", "dim 0 appears multiple times"});
  expect_error("flip dim", [&] { a.flip({2}); }, {"flip", "2"});
  expect_error("roll shifts and dims", [&] { roll(a, {1, 2}, {0}); }, {"roll", "shifts and dimensions must align"});
  expect_error("roll shifts without dims", [&] { roll(a, {1, 2}); }, {"roll", "shifts and dimensions must align"});
  expect_error("roll dim", [&] { a.roll(1, 2); }, {"roll", "2"});
  expect_error("repeat_interleave negative", [&] { repeat_interleave(a, -1); }, {"repeat_interleave", "non-negative"});
  expect_error("repeat_interleave counts", [&] { repeat_interleave(a, idx({1, 2}), 1); },
               {"repeat_interleave", "repeats.size(0) = 2", "input.size(1) = 3"});
  expect_error("repeat_interleave negative count", [&] { repeat_interleave(a, idx({1, -2}), 0); },
               {"repeat_interleave", "negative", "-2"});
  expect_error("meshgrid of 2-D", [&] { meshgrid({a, r({3})}); }, {"meshgrid", "0D or 1D", "[2, 3]"});
  expect_error("meshgrid indexing", [] { meshgrid({r({2}), r({3})}, "xx"); }, {"meshgrid", "indexing", "xx"});
  expect_error("meshgrid dtypes", [] { meshgrid({r({2}), arange(3)}); }, {"meshgrid", "dtype"});
  expect_error("outer of 2-D", [&] { outer(a, r({3})); }, {"outer", "1-D", "[2, 3]"});
  expect_error("bmm of 2-D", [&] { bmm(a, r({2, 3, 4})); }, {"bmm", "batch1 must be a 3D tensor", "[2, 3]"});
  expect_error("bmm batch", [] { bmm(r({2, 2, 3}), r({3, 3, 4})); },
               {"bmm", "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [3, 3]"});
  expect_error("addmm shapes", [] { addmm(r({4}), r({2, 3}), r({2, 4})); },
               {"addmm", "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x4)"});
  expect_error("addmm input", [] { addmm(r({3}), r({2, 3}), r({3, 4})); }, {"addmm", "[3]", "[2, 4]"});
  expect_error("addmm mat1 rank", [] { addmm(r({4}), r({3}), r({3, 4})); }, {"addmm", "mat1 must be a matrix"});
  expect_error("baddbmm input", [] { baddbmm(r({3, 1, 4}), r({2, 2, 3}), r({2, 3, 4})); },
               {"baddbmm", "[3, 1, 4]", "[2, 2, 4]"});
  expect_error("lerp weight dtype", [&] { lerp(a, a, a.to(kFloat64)); }, {"lerp", "`weight`", "float64"});
  expect_error("lerp end dtype", [&] { lerp(a, a.to(kFloat64), 0.5); }, {"lerp", "`end`", "float64"});
  expect_error("lerp shapes", [&] { lerp(a, r({4}), 0.5); }, {"lerp", "[2, 3]", "[4]"});
  expect_error("tril_indices row", [] { tril_indices(-1, 4); }, {"tril_indices", "row must be non-negative", "-1"});
  expect_error("triu_indices col", [] { triu_indices(3, -4); }, {"triu_indices", "col must be non-negative", "-4"});
}

TEST_CASE("random ops and backward: bad arguments") {
  expect_error("dropout p", [] { dropout(r({3}), 1.5); }, {"dropout", "1.5"});
  expect_error("bernoulli of int64", [] { bernoulli(arange(3)); }, {"bernoulli"});
  expect_error("multinomial negative", [] { multinomial(tensor({0.5, -0.1, 0.6}), 1); }, {"multinomial", "-0.1"});
  expect_error("multinomial too many", [] { multinomial(tensor({0.5, 0.5}), 3); }, {"multinomial", "3"});
  expect_error("multinomial rank", [] { multinomial(r({2, 2, 2}).abs(), 1); }, {"multinomial"});
  Tensor x = r({3}).set_requires_grad();
  expect_error("backward of a non-scalar", [&] { (x * 2.0).backward(); }, {"backward", "[3]"});
  expect_error("backward with a wrong gradient", [&] { (x * 2.0).backward(ones({4})); }, {"backward", "[4]", "[3]"});
  expect_error("in-place on a leaf that requires grad", [&] { x.fill_(0); }, {"fill_"});
}

TEST_CASE("ops on tensors on different devices are refused, naming both devices") {
  if (cuda::device_count() == 0) {
    MESSAGE("SKIPPED: no CUDA device (run under --config=cudaemu or on a GPU)");
    return;
  }
  const Device gpu = Device::cuda(0);
  const Tensor a = r({3, 4}), g = r({3, 4}).to(gpu);
  expect_error("add", [&] { add(a, g); }, {"add", "cpu", "cuda:0"});
  expect_error("where", [&] { where(a > 0.0, a, g); }, {"where", "cpu", "cuda:0"});
  expect_error("matmul", [&] { matmul(a, g.t()); }, {"matmul", "cpu", "cuda:0"});
  expect_error("linear", [&] { linear(a, g); }, {"linear", "cpu", "cuda:0"});
  expect_error("cat", [&] { cat({a, g}); }, {"cat", "cpu", "cuda:0"});
  expect_error("stack", [&] { stack({a, g}); }, {"stack", "cpu", "cuda:0"});
  expect_error("index_select", [&] { index_select(g, 0, idx({0})); }, {"index_select", "cpu", "cuda:0"});
  expect_error("gather", [&] { gather(g, 1, tensor({0L, 1L, 2L}, {3, 1})); }, {"gather", "cpu", "cuda:0"});
  expect_error("masked_fill", [&] { masked_fill(g, a > 0.0, 0.0); }, {"masked_fill", "cpu", "cuda:0"});
  expect_error("nll_loss", [&] { nll_loss(log_softmax(g, 1), idx({0, 1, 2})); }, {"nll_loss", "cpu", "cuda:0"});
}
