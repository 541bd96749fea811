// nanoGPT's CausalSelfAttention (model.py, its manual attention path) written against lockstep's public
// API as a user would port it, forward and backward against PyTorch's values: the "attention" case of
// tests/fixtures/op_fixtures.safetensors (tools/fixtures/make_op_fixtures.py), B=2, T=5, C=8, n_head=2, dropout 0.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "autograd/api.h"
#include "tensor/safetensors.h"

namespace {

using namespace lockstep;

// The port. PyTorch's lines are in the comments.
struct CausalSelfAttention {
  int64_t n_embd, n_head;
  Tensor c_attn_weight, c_attn_bias;  // nn.Linear(n_embd, 3 * n_embd)
  Tensor c_proj_weight, c_proj_bias;  // nn.Linear(n_embd, n_embd)
  Tensor bias;                        // the causal mask: torch.tril(torch.ones(block, block)).view(1, 1, block, block)

  CausalSelfAttention(int64_t n_embd, int64_t n_head, int64_t block_size)
      : n_embd(n_embd), n_head(n_head), bias(tril(ones({block_size, block_size})).view({1, 1, block_size, block_size})) {}

  Tensor forward(const Tensor& x) const {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    // q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
    std::vector<Tensor> qkv = linear(x, c_attn_weight, c_attn_bias).split(n_embd, 2);
    Tensor k = qkv[1].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
    Tensor q = qkv[0].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
    Tensor v = qkv[2].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
    // att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(k.size(-1))));
    // att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
    att = att.masked_fill(bias.index({Slice(), Slice(), Slice(None, T), Slice(None, T)}) == 0.0,
                          -std::numeric_limits<double>::infinity());
    att = softmax(att, -1);
    Tensor y = matmul(att, v);  // (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
    // y = y.transpose(1, 2).contiguous().view(B, T, C)
    y = y.transpose(1, 2).contiguous().view({B, T, C});
    return linear(y, c_proj_weight, c_proj_bias);  // self.c_proj(y)
  }
};

// The fixture's "attention/..." tensors by their names after the slash.
std::map<std::string, Tensor> fixture() {
  std::map<std::string, Tensor> parts;
  for (auto& [key, t] : load_safetensors("tests/fixtures/op_fixtures.safetensors").tensors)
    if (key.rfind("attention/", 0) == 0) parts[key.substr(10)] = t;
  return parts;
}

// "" when got matches want in shape and to atol + rtol * |want| in every element, else the first difference.
std::string mismatch(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (!got.defined()) return "undefined";
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + ", want " + shape_str(want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i])) continue;
    std::ostringstream os;
    os.precision(17);
    os << "element " << i << ": " << g[i] << ", want " << w[i];
    return os.str();
  }
  return "";
}

const char* const kParams[] = {"c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"};

// Runs the port on the fixture (each tensor passed through `layout`, and converted to `dtype`), backward
// from sum(out * w), and checks the output and the five gradients against PyTorch's.
template <typename Layout>
void check_against_pytorch(Layout layout, Dtype dtype, double rtol, double atol) {
  std::map<std::string, Tensor> f = fixture();
  REQUIRE(f.size() == 12);  // x, 4 parameters, w, out, 5 gradients
  auto leaf = [&](const std::string& name) {
    Tensor t = layout(f.at(name).to(dtype));
    t.set_requires_grad(true);
    return t;
  };
  const int64_t T = f.at("x").size(1), C = f.at("x").size(2);
  CausalSelfAttention attn(C, /*n_head=*/2, /*block_size=*/T);
  attn.c_attn_weight = leaf("c_attn.weight");
  attn.c_attn_bias = leaf("c_attn.bias");
  attn.c_proj_weight = leaf("c_proj.weight");
  attn.c_proj_bias = leaf("c_proj.bias");
  Tensor x = leaf("x");
  Tensor y = attn.forward(x);
  CHECK(y.dtype() == dtype);
  std::string m = mismatch(y, f.at("out"), rtol, atol);
  CHECK_MESSAGE(m.empty(), "output: ", m);
  sum(y * f.at("w").to(dtype)).backward();
  m = mismatch(x.grad(), f.at("grad.x"), rtol, atol);
  CHECK_MESSAGE(m.empty(), "gradient of x: ", m);
  const Tensor* params[] = {&attn.c_attn_weight, &attn.c_attn_bias, &attn.c_proj_weight, &attn.c_proj_bias};
  for (int i = 0; i < 4; ++i) {
    m = mismatch(params[i]->grad(), f.at(std::string("grad.") + kParams[i]), rtol, atol);
    CHECK_MESSAGE(m.empty(), "gradient of ", kParams[i], ": ", m);
  }
}

// The same values in transposed storage (or, for 1-D tensors, every other element of a larger buffer).
Tensor non_contiguous(const Tensor& t) {
  NoGradGuard no_grad;
  if (t.dim() >= 2) return t.transpose(0, 1).contiguous().transpose(0, 1);
  Tensor v = zeros({2 * t.numel()}, t.dtype()).slice(0, 0, 2 * t.numel(), 2);
  v.copy_(t);
  return v;
}

}  // namespace

TEST_CASE("nanoGPT's CausalSelfAttention: forward and backward match PyTorch in float64") {
  check_against_pytorch([](const Tensor& t) { return t; }, kFloat64, 1e-10, 1e-12);
}

TEST_CASE("CausalSelfAttention on non-contiguous input and weights gives the same values and gradients") {
  check_against_pytorch([](const Tensor& t) { return non_contiguous(t); }, kFloat64, 1e-10, 1e-12);
}

TEST_CASE("CausalSelfAttention in float32 matches PyTorch's float64 to float32 precision") {
  check_against_pytorch([](const Tensor& t) { return t; }, kFloat32, 1e-4, 1e-5);
}
