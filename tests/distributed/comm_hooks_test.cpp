// DDP communication hooks and the GradScaler under data parallelism, on 2 CPU ranks over loopback, on the
// gloo backend's shared-memory and TCP transports: allreduce_hook is DDP's own all-reduce bit for bit;
// bf16_compress_hook and fp16_compress_hook give exactly the compressed all-reduce worked out from each
// rank's local gradients (cast, halved, summed in float32 and rounded once), within the 16-bit format's
// rounding of the float32 average; a run with bf16_compress_hook trains as the plain one; an inf in one
// rank's gradients skips the step on both ranks.
#include <doctest/doctest.h>

#include <cmath>

#include "amp/grad_scaler.h"
#include "distributed/ddp.h"
#include "distributed/found_inf.h"
#include "distributed/gloo/process_group_gloo.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tests/util/ddp_reference.h"
#include "tests/util/gloo_group.h"
#include "tests/util/multiprocess.h"

using namespace lockstep;
using namespace lockstep::testing;
using dist::ProcessGroupGloo;

namespace {

constexpr std::chrono::milliseconds kTimeout{20000};
using Hook = std::shared_ptr<dist::Future> (*)(const std::shared_ptr<dist::ProcessGroup>&, dist::GradBucket&);

// fn(group, rank) on 2 ranks of ProcessGroupGloo, over shared memory and over TCP.
void on_both_transports(const std::function<void(std::shared_ptr<dist::ProcessGroup>, int)>& fn) {
  for (bool shm : {true, false}) {
    ProcessGroupGloo::Options options;
    options.timeout = kTimeout;
    options.shared_memory = shm;
    auto results = run_group(2, options, [&](ProcessGroupGloo& pg, int rank) {
      fn(std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {}), rank);
    });
    CHECK_MESSAGE(all_ok(results), (shm ? "shm" : "tcp"), ":", failures(results));
  }
}

dist::DDPOptions small_buckets() {
  dist::DDPOptions o;
  o.bucket_cap_mb = o.first_bucket_cap_mb = 0.0001;  // a bucket per parameter or two: several hook calls
  return o;
}

// The gradients after one backward on rank `rank`'s half of step 0's batch: through DDP with `hook`
// (null: none), or on the model alone (local).
std::vector<Tensor> gradients(const std::shared_ptr<dist::ProcessGroup>& group, int rank, Hook hook, bool local,
                              const Data& d) {
  auto model = make_model(0);
  nn::CrossEntropyLoss ce;
  const int64_t per = kBatch / 2;
  Tensor x = rows(d.x[0], rank * per, (rank + 1) * per), y = rows(d.y[0], rank * per, (rank + 1) * per);
  if (local) {
    ce((*model)(x), y).backward();
  } else {
    dist::DistributedDataParallel ddp(model, small_buckets(), group);
    if (hook) ddp.register_comm_hook(group, hook);
    ce(ddp(x), y).backward();
  }
  std::vector<Tensor> out;
  for (auto& p : model->parameters()) out.push_back(internal::clone(p.grad()));
  return out;
}

void check_hook_parity(const std::shared_ptr<dist::ProcessGroup>& group, int rank) {
  const Data d = make_data();
  const auto g0 = gradients(group, 0, nullptr, true, d), g1 = gradients(group, 1, nullptr, true, d);
  const auto plain = gradients(group, rank, nullptr, false, d);
  const auto allreduce = gradients(group, rank, dist::default_hooks::allreduce_hook, false, d);
  for (size_t i = 0; i < plain.size(); ++i)
    RANK_CHECK(plain[i].to_vector<float>() == allreduce[i].to_vector<float>(), "allreduce_hook: parameter ", i,
               " differs from DDP's own all-reduce");
  struct Compressed {
    Hook hook;
    Dtype dtype;
    double unit_roundoff;  // half an ulp at 1: 2^-8 for bfloat16's 8 significant bits, 2^-11 for float16's 11
    double tiny;           // float16's subnormal spacing
  };
  for (Compressed c : {Compressed{dist::default_hooks::bf16_compress_hook, kBFloat16, 0x1p-8, 0},
                       Compressed{dist::default_hooks::fp16_compress_hook, kFloat16, 0x1p-11, 0x1p-24}}) {
    const auto got = gradients(group, rank, c.hook, false, d);
    for (size_t i = 0; i < got.size(); ++i) {
      RANK_CHECK(got[i].dtype() == kFloat32, dtype_name(c.dtype), " hook: gradient ", i, " is ", got[i].dtype());
      // What the hook computes: each rank's gradient cast and halved, the two summed in float32 and
      // rounded once (the all-reduce), cast back to float32.
      auto half_of = [&](const Tensor& g) { return internal::mul(internal::to_dtype(g, c.dtype), 0.5); };
      const Tensor want = internal::to_dtype(internal::add(half_of(g0[i]), half_of(g1[i])), kFloat32);
      RANK_CHECK(got[i].to_vector<float>() == want.to_vector<float>(), dtype_name(c.dtype),
                 " hook: parameter ", i, " is not the compressed all-reduce of the ranks' gradients");
      // And within the format's rounding of the float32 average: three roundings of at most u each.
      const auto a = got[i].to_vector<float>(), ref = plain[i].to_vector<float>();
      const auto x0 = g0[i].to_vector<float>(), x1 = g1[i].to_vector<float>();
      for (size_t k = 0; k < a.size(); ++k) {
        const double bound = 3.01 * c.unit_roundoff * (std::abs(x0[k]) + std::abs(x1[k])) / 2 + 2 * c.tiny;
        RANK_CHECK(std::abs(a[k] - ref[k]) <= bound, dtype_name(c.dtype), " hook: parameter ", i, "[", k, "] ", a[k],
                   " vs float32 ", ref[k], " (bound ", bound, ")");
      }
    }
  }
}

// Losses of `steps` steps of DDP training on the reference data, with `hook` or without.
std::vector<double> train(const std::shared_ptr<dist::ProcessGroup>& group, int rank, Hook hook, int steps) {
  const Data d = make_data();
  auto model = make_model(0);
  dist::DistributedDataParallel ddp(model, small_buckets(), group);
  if (hook) ddp.register_comm_hook(group, hook);
  optim::SGD sgd(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss ce;
  const int64_t per = kBatch / 2;
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const int b = s % kSteps;
    sgd.zero_grad();
    Tensor loss = ce(ddp(rows(d.x[b], rank * per, (rank + 1) * per)), rows(d.y[b], rank * per, (rank + 1) * per));
    loss.backward();
    sgd.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

}  // namespace

TEST_CASE("allreduce_hook equals DDP's all-reduce; bf16/fp16_compress_hook equal the compressed all-reduce") {
  on_both_transports(check_hook_parity);
}

TEST_CASE("training with bf16_compress_hook follows the float32 run") {
  on_both_transports([](std::shared_ptr<dist::ProcessGroup> group, int rank) {
    const int steps = 20 * kSteps;
    const auto plain = train(group, rank, nullptr, steps);
    const auto bf16 = train(group, rank, dist::default_hooks::bf16_compress_hook, steps);
    // The same kSteps batches come round again: compare the first round's mean loss with the last's.
    auto round_mean = [](const std::vector<double>& l, int from) {
      double m = 0;
      for (int s = from; s < from + kSteps; ++s) m += l[s] / kSteps;
      return m;
    };
    const double first = round_mean(plain, 0), last = round_mean(plain, steps - kSteps);
    RANK_CHECK(last < 0.6 * first, "the float32 run did not learn: ", first, " -> ", last);
    for (int s = 0; s < steps; ++s)
      RANK_CHECK(std::abs(bf16[s] - plain[s]) < 0.01 + 0.02 * plain[s], "step ", s, ": bf16 hook loss ", bf16[s],
                 ", float32 ", plain[s]);
    RANK_CHECK(round_mean(bf16, steps - kSteps) < 0.6 * round_mean(bf16, 0), "the bf16 run did not learn: ",
               round_mean(bf16, 0), " -> ", round_mean(bf16, steps - kSteps));
  });
}

TEST_CASE("register_comm_hook: once, before backward; a hook's wrong result names the bucket") {
  on_both_transports([](std::shared_ptr<dist::ProcessGroup> group, int rank) {
    const Data d = make_data();
    nn::CrossEntropyLoss ce;
    {
      dist::DistributedDataParallel ddp(make_model(0), {}, group);
      ddp.register_comm_hook(group, dist::default_hooks::allreduce_hook);
      const std::string twice = error_of([&] { ddp.register_comm_hook(group, dist::default_hooks::allreduce_hook); });
      RANK_CHECK(contains(twice, "a communication hook is already registered"), twice);
    }
    {
      dist::DistributedDataParallel ddp(make_model(0), {}, group);
      ce(ddp(rows(d.x[0], rank * 6, rank * 6 + 6)), rows(d.y[0], rank * 6, rank * 6 + 6)).backward();
      const std::string late = error_of([&] { ddp.register_comm_hook(group, dist::default_hooks::allreduce_hook); });
      RANK_CHECK(contains(late, "before the first backward"), late);
    }
    {
      dist::DistributedDataParallel ddp(make_model(0), {}, group);
      ddp.register_comm_hook(0, [](int, dist::GradBucket& bucket) {
        return std::make_shared<dist::Future>(zeros({bucket.buffer().numel() + 1}));
      });
      const std::string bad = error_of(
          [&] { ce(ddp(rows(d.x[0], rank * 6, rank * 6 + 6)), rows(d.y[0], rank * 6, rank * 6 + 6)).backward(); });
      RANK_CHECK(contains(bad, "the communication hook's result for bucket 0 is [") && contains(bad, "not the bucket's"),
                 bad);
    }
  });
}

TEST_CASE("GradScaler under DDP: an inf in one rank's gradients skips the step on both ranks") {
  on_both_transports([](std::shared_ptr<dist::ProcessGroup> group, int rank) {
    for (bool agree : {true, false}) {
      Tensor p = tensor({1.0f, 2.0f}, {2}).requires_grad_(true);
      optim::SGD opt({p}, optim::SGDOptions(0.5));
      amp::GradScalerOptions o;
      if (agree) o.found_inf_reduction = dist::found_inf_all_reduce(group);
      amp::GradScaler scaler(o);
      // Rank 0's gradient overflows; rank 1's is fine.
      const float w = rank == 0 ? INFINITY : 1.0f;
      scaler.scale((p * tensor({w, 1.0f}, {2})).sum()).backward();
      const bool stepped = scaler.step(opt);
      scaler.update();
      const bool want = !agree && rank == 1;  // alone, rank 1 would step
      RANK_CHECK(stepped == want, agree ? "with" : "without", " the all-reduce: stepped ", stepped);
      RANK_CHECK(scaler.get_scale() == (want ? 65536.0 : 32768.0), "scale ", scaler.get_scale());
      RANK_CHECK(p.to_vector<float>() == (want ? std::vector<float>{0.5f, 1.5f} : std::vector<float>{1.0f, 2.0f}),
                 "parameter moved to ", p.to_vector<float>()[0]);
    }
  });
}
