// The image-classification examples' shared pieces (classify.h).
#include "examples/common/classify.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "autograd/autocast.h"
#include "distributed/api.h"
#include "examples/common/step_timing.h"
#include "nn/api.h"
#include "tensor/backend.h"

namespace lockstep::examples {

std::shared_ptr<data::TensorDataset> fashion_mnist_images(const std::string& dir, bool train, int64_t limit,
                                                          const std::string& flag) {
  auto full = data::load_fashion_mnist(dir, train, /*normalize=*/true, /*flatten=*/false);
  const int64_t n = limit < 0 ? full->size() : limit;
  LOCKSTEP_CHECK(n > 0 && n <= full->size(), "", flag, " ", limit, " is outside [1, ", full->size(), "]");
  // [N, 28, 28] -> [N, 1, 28, 28]
  return std::make_shared<data::TensorDataset>(full->inputs().narrow(0, 0, n).unsqueeze(1).contiguous(),
                                               full->targets().narrow(0, 0, n).contiguous());
}

std::vector<double> all_reduce_sum(std::vector<double> v, Device device) {
  Tensor t = tensor(v, {static_cast<int64_t>(v.size())}, device);
  dist::all_reduce(t);
  Tensor h = t.to(Device::cpu());
  for (size_t i = 0; i < v.size(); ++i) v[i] = h.data<double>()[i];
  return v;
}

double evaluate_accuracy(nn::Module& model, data::DataLoader& loader, int64_t n, Device device) {
  NoGradGuard no_grad;
  model.eval();
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const int64_t mine = (n - rank + world - 1) / world;
  int64_t correct = 0, counted = 0;
  for (auto& batch : loader) {
    int64_t valid = std::min<int64_t>(batch.input.size(0), mine - counted);
    if (valid <= 0) break;
    Tensor hit = eq(argmax(model.forward(batch.input), 1), batch.target);
    if (valid < hit.numel()) hit = index_select(hit, arange(valid, TensorOptions(kInt64, device)));
    correct += sum(hit).item<int64_t>();
    counted += valid;
  }
  model.train();
  auto totals = all_reduce_sum({double(correct), double(counted)}, device);
  return totals[0] / totals[1];
}

void bench_steps(Sharding& sharding, data::DataLoader& loader, Device device, int64_t steps, int64_t batch_size,
                 bool autocast_bf16) {
  nn::CrossEntropyLoss criterion;
  std::vector<double> step_ms, fwd, bwd, wait, opt_ms;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  double cpu0 = 0;
  auto it = loader.begin();
  for (int64_t i = 0; i < steps + 5; ++i) {
    if (it == loader.end()) it = loader.begin();
    data::Batch batch = *it;
    ++it;
    auto t0 = Clock::now();
    sharding.zero_grad();
    Tensor loss;
    {
      autocast guard(device.type, kBFloat16, autocast_bf16);
      loss = criterion(sharding.forward(batch.input), batch.target);
    }
    loss.item<float>();
    auto t1 = Clock::now();
    loss.backward();
    auto t2 = Clock::now();
    sharding.step();
    if (device.is_cuda()) backend_for(device).synchronize(device);
    auto t3 = Clock::now();
    if (i == 4) cpu0 = cpu_seconds();
    if (i < 5) continue;
    const double w = sharding.ddp() ? sharding.ddp()->reducer().last_wait_seconds() * 1e3 : 0;
    step_ms.push_back(ms(t0, t3)), fwd.push_back(ms(t0, t1)), bwd.push_back(ms(t1, t2) - w), wait.push_back(w);
    opt_ms.push_back(ms(t2, t3));
  }
  const double cpu_per_step = (cpu_seconds() - cpu0) * 1e3 / double(steps);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Under full, backward's gathers and reduce-scatters are waited for inside its hooks: no split.
  char split[64] = "";
  if (sharding.ddp()) std::snprintf(split, sizeof split, " allreduce_wait %.2f", median(wait));
  if (dist::get_rank() == 0)
    std::printf("bench: %d rank(s), --shard %s, batch %ld per rank, %ld steps: forward %.2f backward %.2f%s "
                "optimizer %.2f (medians, ms); cpu_ms %.2f per step (mean)\nstep_ms %.3f\n",
                dist::get_world_size(), sharding.mode().c_str(), long(batch_size), long(steps), median(fwd),
                median(bwd), split, median(opt_ms), cpu_per_step, median(step_ms));
}

}  // namespace lockstep::examples
