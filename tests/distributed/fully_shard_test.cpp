// fully_shard on CPU ranks over loopback, against DDP on the same data: 20 Adam steps to 1e-6 at 2 and 3
// ranks (550 parameters in units of 130, 208 and 176 elements and the root's 36: shards padded, and some
// parameters with no element on a rank), with
// and without resharding after forward, gradient accumulation without sync, the sharded gradient-norm
// clip, the bfloat16 mixed-precision policy, the full state dict, and sharded checkpoints saved at 2
// ranks and resumed at 3 on the same loss curve (also with two param groups, a scheduler and the step).
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "autograd/engine.h"
#include "distributed/ddp.h"
#include "distributed/fsdp/fully_shard.h"
#include "distributed/fsdp/state_dict.h"
#include "distributed/init.h"
#include "nn/utils/clip_grad.h"
#include "optim/api.h"
#include "tests/distributed/sharding_util.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using namespace lockstep::testing;
namespace F = lockstep::nn::functional;

namespace {

constexpr int kSteps = 20;

void shard(Stack& model, dist::FSDPOptions o = {}) {
  for (const auto& b : *model->blocks) dist::fully_shard(b, o);
  dist::fully_shard(model, o);
}

// The FSDP model's gathered parameters against the DDP model's.
void check_same(Stack& fsdp_model, nn::Module& ref, const std::string& when, double tol = 1e-6) {
  auto full = dist::full_state_dict(*fsdp_model);
  auto want = ref.state_dict();
  RANK_CHECK(full.size() == want.size(), when, ": ", full.size(), " entries, expected ", want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    RANK_CHECK(full[i].first == want[i].first, when, ": entry ", i, " is ", full[i].first, ", expected ", want[i].first);
    RANK_CHECK(full[i].second.shape() == want[i].second.shape(), when, ": ", want[i].first, " is ", full[i].second.shape());
    const double d = max_abs_diff(full[i].second, want[i].second);
    RANK_CHECK(d <= tol, when, ": ", want[i].first, " differs by ", d);
  }
}

}  // namespace

TEST_CASE("fully_shard: 20 Adam steps equal DDP's at 2 and 3 ranks") {
  for (int world : {2, 3}) {
    for (bool reshard : {true, false}) {
      CAPTURE(world);
      CAPTURE(reshard);
      on_ranks(world, [&](int rank) {
        Stack ref_model = make_stack(7), model = make_stack(rank == 0 ? 7 : 99);  // fully_shard takes rank 0's
        dist::DistributedDataParallel ddp(ref_model.ptr());
        optim::Adam ref_opt(ddp.parameters(), optim::AdamOptions(1e-2));
        dist::FSDPOptions o;
        o.reshard_after_forward = reshard;
        shard(model, o);
        optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
        // Each rank's parameters are 1-D slices: at most ceil(n / W) of each unit's n elements.
        int64_t local = 0;
        for (auto& p : model->parameters()) {
          RANK_CHECK(p.dim() == 1, "a sharded parameter is ", p.shape());
          local += p.numel();
        }
        auto ceil_div = [&](int64_t n) { return (n + world - 1) / world; };
        RANK_CHECK(local <= ceil_div(130) + ceil_div(208) + ceil_div(176) + ceil_div(36),
                   "rank ", rank, " holds ", local, " elements");
        check_same(model, *ref_model, "start");
        for (int s = 0; s < kSteps; ++s) {
          ref_opt.zero_grad();
          opt.zero_grad();
          auto [x, y] = batch(s, rank, world);
          Tensor ref_loss = F::cross_entropy(ddp(x), y);
          ref_loss.backward();
          Tensor loss = F::cross_entropy(model(x), y);
          RANK_CHECK(std::abs(loss.item<float>() - ref_loss.item<float>()) <= 1e-6, "step ", s, ": loss ",
                     loss.item<float>(), ", DDP's ", ref_loss.item<float>());
          loss.backward();
          for (auto& p : model->parameters())
            RANK_CHECK(p.grad().defined() || p.numel() == 0, "a parameter has no gradient after backward");
          ref_opt.step();
          opt.step();
          check_same(model, *ref_model, "step " + std::to_string(s));
        }
      });
    }
  }
}

TEST_CASE("fully_shard: a block's parameters are freed after its forward and gathered again for backward") {
  on_ranks(2, [&](int rank) {
    Stack model = make_stack(7);
    std::vector<std::weak_ptr<Storage>> full;
    for (auto& p : model->parameters()) full.push_back(p.storage());
    shard(model);
    for (size_t i = 0; i < full.size(); ++i) RANK_CHECK(full[i].expired(), "parameter ", i, "'s full storage is alive");
    auto [x, y] = batch(0, rank, 2);
    // fc.weight: elements 0..90 of a 130-element unit; rank 0 holds the unit's [0, 65), rank 1 [65, 130).
    Tensor w = model->blocks[0]->as<LNBlock>()->fc->weight;
    const int64_t sharded = w.numel();
    RANK_CHECK(w.dim() == 1 && sharded == (rank == 0 ? 65 : 26), "block 0's weight holds ", w.shape());
    Tensor loss = F::cross_entropy(model(x), y);
    // After forward: the block is back to its shard, the root (head) still gathered.
    RANK_CHECK(w.numel() == sharded, "block 0's weight after forward is ", w.shape());
    RANK_CHECK(model->head->weight.shape() == Shape({3, 11}), "the root's head after forward is ",
               model->head->weight.shape());
    loss.backward();
    RANK_CHECK(model->head->weight.dim() == 1, "the root's head after backward is ", model->head->weight.shape());
    RANK_CHECK(w.numel() == sharded && (sharded == 0 || w.grad().shape() == w.shape()), "block 0's gradient is ",
               w.grad().defined() ? w.grad().shape() : Shape{});
  });
}

TEST_CASE("fully_shard: backward accumulates a unit's gradients straight into its flat reduce-scatter input") {
  // Block 0's fc.weight, fc.bias, ln.weight, ln.bias lie at 0, 91, 104 and 117 of its 130-element unit.
  // A hook registered before fully_shard's runs first and sees each .grad as autograd left it: with
  // one dtype throughout, views of one flat buffer at those offsets; with a bfloat16 compute dtype and a
  // float32 reduce dtype, gradients of their own (copied into the float32 buffer after).
  for (bool mixed : {false, true}) {
    CAPTURE(mixed);
    on_ranks(2, [&](int rank) {
      Stack model = make_stack(7);
      auto block = model->blocks[0]->as<LNBlock>();
      std::vector<Tensor> params{block->fc->weight, block->fc->bias, block->ln->weight, block->ln->bias};
      std::vector<Tensor> seen(params.size());
      for (size_t i = 0; i < params.size(); ++i)
        autograd::register_post_accumulate_grad_hook(params[i], [&seen, i](Tensor& p) { seen[i] = p.grad(); });
      dist::FSDPOptions o;
      if (mixed) {
        o.mp_policy.param_dtype = kBFloat16;
        o.mp_policy.reduce_dtype = kFloat32;
      }
      shard(model, o);
      auto [x, y] = batch(0, rank, 2);
      F::cross_entropy(model(mixed ? x.to(kBFloat16) : x).to(kFloat32), y).backward();
      const int64_t offsets[] = {0, 91, 104, 117};
      const Shape shapes[] = {{13, 7}, {13}, {13}, {13}};
      for (size_t i = 0; i < params.size(); ++i) {
        RANK_CHECK(seen[i].defined(), "parameter ", i, " got no gradient");
        RANK_CHECK(seen[i].shape() == shapes[i], "parameter ", i, "'s gradient is ", seen[i].shape());
        const bool shared = seen[i].storage() == seen[0].storage();
        if (mixed) {
          RANK_CHECK(i == 0 || !shared, "parameter ", i, "'s bfloat16 gradient shares parameter 0's storage");
          RANK_CHECK(seen[i].dtype() == kBFloat16, "parameter ", i, "'s gradient is ", seen[i].dtype());
        } else {
          RANK_CHECK(shared, "parameter ", i, "'s gradient is not in the unit's flat buffer");
          RANK_CHECK(seen[i].storage_offset() == offsets[i], "parameter ", i, "'s gradient is at ",
                     seen[i].storage_offset(), ", expected ", offsets[i]);
          RANK_CHECK(seen[i].storage()->nbytes() == 130 * 4, "the flat gradient holds ", seen[i].storage()->nbytes(),
                     " bytes, expected 130 float32");
        }
      }
    });
  }
}

TEST_CASE("fully_shard: accumulation without gradient sync equals DDP's no_sync") {
  on_ranks(2, [&](int rank) {
    Stack ref_model = make_stack(7), model = make_stack(7);
    dist::DistributedDataParallel ddp(ref_model.ptr());
    optim::Adam ref_opt(ddp.parameters(), optim::AdamOptions(1e-2));
    shard(model);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    dist::FSDPModule fsdp_root(dist::fsdp_unit_of(*model));
    for (int s = 0; s < 4; ++s) {
      ref_opt.zero_grad();
      opt.zero_grad();
      for (int micro = 0; micro < 3; ++micro) {
        auto [x, y] = batch(10 * s + micro, rank, 2);
        const bool last = micro == 2;
        {
          std::optional<dist::DistributedDataParallel::NoSync> guard;
          if (!last) guard.emplace(ddp.reducer());
          F::cross_entropy(ddp(x), y).backward();
        }
        fsdp_root.set_requires_gradient_sync(last);
        F::cross_entropy(model(x), y).backward();
      }
      ref_opt.step();
      opt.step();
      check_same(model, *ref_model, "step " + std::to_string(s));
    }
  });
}

TEST_CASE("fully_shard: gradients kept across iterations accumulate, as without FSDP") {
  on_ranks(2, [&](int rank) {
    Stack ref_model = make_stack(7), model = make_stack(7);
    dist::DistributedDataParallel ddp(ref_model.ptr());
    optim::SGD ref_opt(ddp.parameters(), optim::SGDOptions(0.1));
    shard(model);
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
    for (int s = 0; s < 3; ++s) {  // no zero_grad: .grad sums every backward so far
      auto [x, y] = batch(s, rank, 2);
      F::cross_entropy(ddp(x), y).backward();
      F::cross_entropy(model(x), y).backward();
      ref_opt.step();
      opt.step();
      check_same(model, *ref_model, "step " + std::to_string(s));
    }
  });
}

TEST_CASE("dist::clip_grad_norm_ over shards equals clip_grad_norm_ over DDP's whole gradients") {
  for (double norm_type : {2.0, 3.0, static_cast<double>(INFINITY)}) {
    on_ranks(3, [&](int rank) {
      Stack ref_model = make_stack(7), model = make_stack(7);
      dist::DistributedDataParallel ddp(ref_model.ptr());
      optim::SGD ref_opt(ddp.parameters(), optim::SGDOptions(0.5));
      shard(model);
      optim::SGD opt(model->parameters(), optim::SGDOptions(0.5));
      for (int s = 0; s < 3; ++s) {
        ref_opt.zero_grad();
        opt.zero_grad();
        auto [x, y] = batch(s, rank, 3);
        F::cross_entropy(ddp(x), y).backward();
        F::cross_entropy(model(x), y).backward();
        const double want = nn::utils::clip_grad_norm_(ddp.parameters(), 0.05, norm_type).item<float>();
        const double got = dist::clip_grad_norm_(model->parameters(), 0.05, norm_type).item<float>();
        RANK_CHECK(std::abs(got - want) <= 1e-6 * std::max(1.0, want), "norm ", got, ", DDP's ", want);
        RANK_CHECK(want > 0.05, "the test must clip: norm ", want);
        ref_opt.step();
        opt.step();
        check_same(model, *ref_model, "step " + std::to_string(s));
      }
    });
  }
}

TEST_CASE("fully_shard: MixedPrecisionPolicy computes in bfloat16 and keeps float32 shards and gradients") {
  on_ranks(2, [&](int rank) {
    Stack ref_model = make_stack(7), model = make_stack(7);
    dist::DistributedDataParallel ddp(ref_model.ptr());
    optim::Adam ref_opt(ddp.parameters(), optim::AdamOptions(1e-2));
    dist::FSDPOptions o;
    o.mp_policy.param_dtype = kBFloat16;
    o.mp_policy.reduce_dtype = kFloat32;
    shard(model, o);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    for (int s = 0; s < 5; ++s) {
      ref_opt.zero_grad();
      opt.zero_grad();
      auto [x, y] = batch(s, rank, 2);
      Tensor ref_loss = F::cross_entropy(ddp(x), y);
      ref_loss.backward();
      Tensor out = model(x.to(kBFloat16));
      RANK_CHECK(out.dtype() == kBFloat16, "the output is ", out.dtype());
      Tensor loss = F::cross_entropy(out.to(kFloat32), y);
      // bfloat16 has 8 bits of mantissa: the loss agrees to about 1%.
      RANK_CHECK(std::abs(loss.item<float>() - ref_loss.item<float>()) <= 0.02 * ref_loss.item<float>(), "step ", s,
                 ": loss ", loss.item<float>(), ", float32's ", ref_loss.item<float>());
      loss.backward();
      for (auto& p : model->parameters()) {
        RANK_CHECK(p.dtype() == kFloat32, "a sharded parameter is ", p.dtype());
        RANK_CHECK(!p.grad().defined() || p.grad().dtype() == kFloat32, "a sharded gradient is ", p.grad().dtype());
      }
      ref_opt.step();
      opt.step();
    }
    check_same(model, *ref_model, "after 5 steps", 0.03);
  });
}

TEST_CASE("fully_shard: load_full_state_dict puts a full state dict into the shards") {
  on_ranks(3, [&](int rank) {
    Stack src = make_stack(5), model = make_stack(7);
    shard(model);
    dist::load_full_state_dict(*model, src->state_dict());
    check_same(model, *src, "loaded", 0);
    auto sd = src->state_dict();
    sd.pop_back();
    expect_error([&] { dist::load_full_state_dict(*model, sd); }, "head.bias");
    sd = src->state_dict();
    sd[0].second = zeros({2});
    expect_error([&] { dist::load_full_state_dict(*model, sd); }, "size mismatch for 'blocks.0.fc.weight'");
    auto only0 = dist::full_state_dict(*model, /*rank0_only=*/true);
    RANK_CHECK(only0.empty() == (rank != 0), "rank ", rank, " got ", only0.size(), " entries");
  });
}

TEST_CASE("fully_shard: a sharded checkpoint saved at 2 ranks resumes at 3 on the same loss curve") {
  TempDir dir;
  const std::string path = dir.path;
  // The reference: 10 steps straight at 2 ranks; losses of steps 5..9 recorded.
  std::vector<float> ref_losses(10);
  {
    const uint16_t port = free_port();
    const std::string out = path + "/losses.bin";
    auto results = run_ranks(2, [&](int rank) {
      init_tcp_group(port, 2, rank, std::chrono::seconds(30));
      Stack model = make_stack(7);
      shard(model);
      optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
      std::vector<float> losses;
      for (int s = 0; s < 10; ++s) {
        if (s == 5) dist::save_sharded_checkpoint(path, *model, &opt);
        opt.zero_grad();
        // Each step's whole batch over the ranks (the global batch is the same at 2 and 3 ranks).
        auto [x, y] = batch(s, rank, 2);
        Tensor loss = F::cross_entropy(model(x), y);
        loss.backward();
        opt.step();
        Tensor total = loss.detach().reshape({1}).clone();
        dist::all_reduce(total, dist::ReduceOp::AVG);
        losses.push_back(total.item<float>());
      }
      if (rank == 0) {
        FILE* f = std::fopen(out.c_str(), "wb");
        std::fwrite(losses.data(), sizeof(float), losses.size(), f);
        std::fclose(f);
      }
      dist::destroy_process_group();
    });
    REQUIRE_MESSAGE(all_ok(results), failures(results));
    FILE* f = std::fopen(out.c_str(), "rb");
    REQUIRE(f);
    REQUIRE(std::fread(ref_losses.data(), sizeof(float), 10, f) == 10);
    std::fclose(f);
  }
  CHECK(std::filesystem::exists(path + "/index.json"));
  CHECK(std::filesystem::exists(path + "/rank1.safetensors"));
  on_ranks(3, [&](int rank) {
    Stack model = make_stack(123);  // other weights: the checkpoint must replace them
    shard(model);
    optim::Adam opt(model->parameters(), optim::AdamOptions(0.5));
    dist::load_sharded_checkpoint(path, *model, &opt);
    RANK_CHECK(opt.lr(0) == 1e-2, "loaded lr ", opt.lr(0));
    for (int s = 5; s < 10; ++s) {
      opt.zero_grad();
      auto [x, y] = batch(s, rank, 3);
      Tensor loss = F::cross_entropy(model(x), y);
      loss.backward();
      opt.step();
      Tensor total = loss.detach().reshape({1}).clone();
      dist::all_reduce(total, dist::ReduceOp::AVG);
      RANK_CHECK(std::abs(total.item<float>() - ref_losses[s]) <= 1e-5, "step ", s, ": loss ", total.item<float>(),
                 " at 3 ranks, ", ref_losses[s], " at 2");
    }
  });
}

// A training checkpoint, as gpt --shard full writes it: AdamW over two param groups (decay on the 2-D
// weights), a scheduler and the step, saved twice; the second save's files replace the first's, and it
// resumes at 3 ranks on the 2-rank run's losses and lrs.
TEST_CASE("fully_shard: a training checkpoint (two param groups, scheduler, step) resumes at 3 ranks") {
  TempDir dir;
  const std::string path = dir.path + "/ck";  // created by the save
  // Before sharding: the 2-D weights are the decayed ones (sharding flattens them all).
  auto sharded_adamw = [&](Stack& model) {
    std::vector<bool> two_d;
    for (auto& p : model->parameters()) two_d.push_back(p.dim() >= 2);
    shard(model);
    std::vector<Tensor> decay, rest;
    auto ps = model->parameters();
    for (size_t i = 0; i < ps.size(); ++i) (two_d[i] ? decay : rest).push_back(ps[i]);
    return std::make_unique<optim::AdamW>(std::vector<optim::AdamW::ParamGroup>{
        {decay, optim::AdamWOptions(1e-2).weight_decay(0.1)}, {rest, optim::AdamWOptions(1e-2).weight_decay(0)}});
  };
  auto train = [](Stack& model, optim::Optimizer& opt, optim::LRScheduler& sched, int s, int rank, int world) {
    opt.zero_grad();
    auto [x, y] = batch(s, rank, world);
    Tensor loss = F::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    sched.step();
    Tensor total = loss.detach().reshape({1}).clone();
    dist::all_reduce(total, dist::ReduceOp::AVG);
    return total.item<float>();
  };
  std::vector<float> ref(6, 0);  // (loss, group 1's lr) after each of steps 5..7
  const std::string out = dir.path + "/ref.bin";
  {
    const uint16_t port = free_port();
    auto results = run_ranks(2, [&](int rank) {
      init_tcp_group(port, 2, rank, std::chrono::seconds(30));
      Stack model = make_stack(7);
      auto opt = sharded_adamw(model);
      optim::StepLR sched(*opt, 2, 0.5);
      std::vector<float> got;
      for (int s = 0; s < 8; ++s) {
        const float loss = train(model, *opt, sched, s, rank, 2);
        if (s >= 5) got.push_back(loss), got.push_back(static_cast<float>(opt->lr(1)));
        if (s == 2 || s == 4) {
          Checkpoint what;
          what.model = model.get();
          what.optimizer = opt.get();
          what.scheduler = &sched;
          what.step = s;
          what.metadata = {{"data_position", std::to_string(10 * s)}};
          dist::save_sharded_checkpoint(path, what);
        }
      }
      if (rank == 0) {
        FILE* f = std::fopen(out.c_str(), "wb");
        std::fwrite(got.data(), sizeof(float), got.size(), f);
        std::fclose(f);
      }
      dist::destroy_process_group();
    });
    REQUIRE_MESSAGE(all_ok(results), failures(results));
    FILE* f = std::fopen(out.c_str(), "rb");
    REQUIRE(f);
    REQUIRE(std::fread(ref.data(), sizeof(float), 6, f) == 6);
    std::fclose(f);
  }
  std::vector<std::string> files;
  for (auto& e : std::filesystem::directory_iterator(path)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"index.json", "rank0.step4.safetensors", "rank1.step4.safetensors"});
  on_ranks(3, [&](int rank) {
    Stack model = make_stack(123);
    auto opt = sharded_adamw(model);
    optim::StepLR sched(*opt, 2, 0.5);
    Checkpoint into;
    into.model = model.get();
    into.optimizer = opt.get();
    into.scheduler = &sched;
    Checkpoint got = dist::load_sharded_checkpoint(path, into);
    RANK_CHECK(got.step == 4 && got.metadata["data_position"] == "40", "step ", got.step, ", data_position '",
               got.metadata["data_position"], "'");
    for (int s = 5; s < 8; ++s) {
      const float loss = train(model, *opt, sched, s, rank, 3);
      const size_t k = 2 * (s - 5);
      RANK_CHECK(std::abs(loss - ref[k]) <= 1e-5, "step ", s, ": loss ", loss, " at 3 ranks, ", ref[k], " at 2");
      RANK_CHECK(static_cast<float>(opt->lr(1)) == ref[k + 1], "step ", s, ": lr ", opt->lr(1), ", expected ",
                 ref[k + 1]);
    }
  });
  // An index that names another save's step than its files (a save cut short) is refused, naming both.
  {
    std::ifstream in(path + "/index.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"step\": 4");
    REQUIRE(at != std::string::npos);
    text.replace(at, 9, "\"step\": 3");
    std::ofstream(path + "/index.json") << text;
  }
  on_ranks(1, [&](int) {
    Stack model = make_stack(1);
    auto opt = sharded_adamw(model);
    Checkpoint into;
    into.model = model.get();
    into.optimizer = opt.get();
    expect_error([&] { dist::load_sharded_checkpoint(path, into); }, "is from step 4, index.json from step 3");
  });
}

TEST_CASE("a rank SIGKILLed mid-training under fully_shard: the other's next gather throws, naming it") {
  const uint16_t port = free_port();
  auto results = run_ranks(
      2,
      [&](int rank) {
        init_tcp_group(port, 2, rank, std::chrono::seconds(5));
        Stack model = make_stack(7);
        shard(model);
        optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
        for (int s = 0; s < 10; ++s) {
          if (rank == 1 && s == 3) ::raise(SIGKILL);
          auto [x, y] = batch(s, rank, 2);
          try {
            opt.zero_grad();
            F::cross_entropy(model(x), y).backward();
            opt.step();
          } catch (const Error& e) {
            RANK_CHECK(s == 3, "failed at step ", s, ": ", e.what());
            RANK_CHECK(std::string(e.what()).find("rank 1") != std::string::npos, e.what());
            ::_exit(0);  // the group is broken: leave without destroy_process_group
          }
        }
        RANK_CHECK(false, "rank ", rank, " trained on after rank 1 died");
      },
      std::chrono::seconds(60));
  CHECK_MESSAGE(results[0].ok(), results[0].message);
  CHECK(results[1].exit_code == -1);
}

TEST_CASE("fully_shard rejects what it cannot shard") {
  on_ranks(1, [&](int) {
    Stack model = make_stack(7);
    dist::fully_shard(model->head);
    expect_error([&] { dist::fully_shard(model->head); }, "Linear is already fully_shard-ed");
    expect_error([] { dist::fully_shard(std::shared_ptr<nn::Module>()); }, "module is null");
    auto mixed = std::make_shared<nn::Module>("Mixed");
    mixed->register_parameter("a", zeros({2}));
    mixed->register_parameter("b", zeros({2}, TensorOptions(kFloat64)));
    expect_error([&] { dist::fully_shard(mixed); }, "parameter 'b' is float64 on cpu but 'a' is float32");
    expect_error([] { dist::clip_grad_norm_({}, 1.0, -1.0); }, "dist::clip_grad_norm_: invalid norm_type -1");
  });
}
