// examples/gpt against PyTorch and against itself, on CPU ranks over loopback:
//  - parity: the first 20 step losses of a tiny GPT equal PyTorch's (tests/fixtures/gpt_parity.json, written
//    by tools/fixtures/make_gpt_fixture.sh with tools/twins/gpt_twin.py from the same initial weights and batches) to
//    1e-4 relative, on 1 rank at batch 4, on 2 ranks at batch 2, and on 2 ranks at batch 1 with 2
//    micro-batches under no_sync: the same global batch every time;
//  - resume: a run stopped after its checkpoint and resumed continues with the losses of a run never
//    stopped, bit for bit, dropout included (batches and masks are functions of seed, rank and step);
//  - bfloat16: under autocast the losses stay within bf16 rounding of the float32 fixture.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "distributed/init.h"
#include "examples/gpt/train.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using namespace lockstep::examples;

namespace {

void init(int world, int rank, uint16_t port) {
  testing::init_tcp_group(port, world, rank, std::chrono::seconds(60));
}

struct Fixture {
  GPTTrainOptions options;  // global batch in options.train.batch_size
  std::vector<double> losses;
};

Fixture load_fixture() {
  std::ifstream in("tests/fixtures/gpt_parity.json");
  REQUIRE(in.good());
  auto j = nlohmann::json::parse(in);
  const auto& c = j.at("config");
  Fixture f;
  GPTTrainOptions& o = f.options;
  o.text = c.at("text").get<std::string>();
  o.model.n_layer = c.at("n_layer"), o.model.n_head = c.at("n_head"), o.model.n_embd = c.at("n_embd");
  o.model.block_size = c.at("block_size"), o.model.dropout = c.at("dropout");
  o.train.steps = c.at("steps"), o.train.batch_size = c.at("batch_size"), o.train.lr = c.at("lr");
  o.grad_accum = c.at("grad_accum"), o.warmup_iters = c.at("warmup_iters"), o.lr_decay_iters = c.at("lr_decay_iters");
  o.min_lr = c.at("min_lr"), o.beta2 = c.at("beta2"), o.weight_decay = c.at("weight_decay");
  o.grad_clip = c.at("grad_clip"), o.seed = c.at("seed");
  o.train.backend = "gloo", o.train.device = "cpu";
  o.eval_interval = 1000, o.eval_iters = 1, o.sample_tokens = 0, o.quiet = true;
  f.losses = j.at("losses").get<std::vector<double>>();
  REQUIRE(f.losses.size() == static_cast<size_t>(o.train.steps));
  return f;
}

// Trains on `world` ranks at `batch` rows per rank and micro-step, `accum` micro-steps, and checks every
// step's loss against PyTorch's; `shard` is gpt's --shard.
void check_parity(int world, int64_t batch, int64_t accum, const std::string& shard = "none") {
  Fixture fx = load_fixture();
  REQUIRE(world * batch * accum == fx.options.train.batch_size);
  uint16_t port = testing::free_port();
  auto results = testing::run_ranks(world, [&](int rank) {
    init(world, rank, port);
    GPTTrainOptions o = fx.options;
    o.train.batch_size = batch;
    o.grad_accum = accum;
    o.shard = shard;
    GPTTrainResult r = train_gpt(o);
    RANK_CHECK(r.losses.size() == fx.losses.size(), "ran ", r.losses.size(), " steps");
    for (size_t s = 0; s < fx.losses.size(); ++s)
      RANK_CHECK(std::abs(r.losses[s] - fx.losses[s]) <= 1e-4 * std::abs(fx.losses[s]), "step ", s, ": loss ",
                 r.losses[s], ", PyTorch's ", fx.losses[s]);
    dist::destroy_process_group();
  }, std::chrono::seconds(120));
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

}  // namespace

TEST_CASE("GPT has nanoGPT's parameter names, with lm_head.weight tied to transformer.wte.weight") {
  GPT model(GPTConfig{.block_size = 8, .vocab_size = 11, .n_layer = 1, .n_head = 2, .n_embd = 4});
  std::vector<std::string> names;
  for (auto& [name, p] : model->named_parameters()) names.push_back(name);
  const std::vector<std::string> want = {
      "transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
      "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
      "transformer.h.0.attn.c_proj.bias", "transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
      "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias", "transformer.h.0.mlp.c_proj.weight",
      "transformer.h.0.mlp.c_proj.bias", "transformer.ln_f.weight", "transformer.ln_f.bias"};
  CHECK(names == want);  // lm_head.weight is the embedding's tensor: yielded once, under its first name
  CHECK(model->lm_head->weight.data_ptr() == model->transformer->wte->weight.data_ptr());
  bool in_state_dict = false;
  for (auto& [name, t] : model->state_dict()) in_state_dict |= name == "lm_head.weight";
  CHECK(in_state_dict);  // as PyTorch's state_dict, which loads into nanoGPT's GPT
  auto [logits, loss] = model(zeros({2, 8}, kInt64), zeros({2, 8}, kInt64));
  CHECK(logits.shape() == Shape{2, 8, 11});
  CHECK(std::abs(loss.item<double>() - std::log(11.0)) < 0.05);  // small init: nearly uniform predictions
  CHECK(model->generate(zeros({1, 1}, kInt64), 20, 1.0, 3).shape() == Shape{1, 21});  // crops past block_size
}

TEST_CASE("gpt on 1 rank at batch 4 follows PyTorch's losses") { check_parity(1, 4, 1); }

TEST_CASE("gpt on 2 ranks at batch 2 follows the same losses") { check_parity(2, 2, 1); }

TEST_CASE("gpt on 2 ranks at batch 1 with 2 micro-batches under no_sync follows the same losses") {
  check_parity(2, 1, 2);
}

TEST_CASE("gpt --shard optimizer (ZeRO-1) on 2 ranks follows the same losses") { check_parity(2, 2, 1, "optimizer"); }

TEST_CASE("gpt --shard full (fully_shard) on 2 ranks follows the same losses, with and without micro-batches") {
  check_parity(2, 2, 1, "full");
  check_parity(2, 1, 2, "full");
}

TEST_CASE("a gpt run stopped after a checkpoint and resumed continues with the uninterrupted run's losses") {
  Fixture fx = load_fixture();
  char path[] = "/tmp/gpt_test_ckpt_XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  ::unlink(path);  // the first run must start fresh, not resume
  uint16_t port = testing::free_port();
  auto results = testing::run_ranks(2, [&](int rank) {
    init(2, rank, port);
    GPTTrainOptions o = fx.options;
    o.train.steps = 12;
    o.train.batch_size = 2;
    o.model.dropout = 0.1;  // masks must be redrawn the same after the restart too
    GPTTrainResult whole = train_gpt(o);
    RANK_CHECK(whole.losses.size() == 12u, "ran ", whole.losses.size(), " steps");

    o.train.checkpoint = path;
    o.checkpoint_interval = 2;
    o.stop_after = 7;  // checkpoints after steps 1, 3, 5 and 6; the last one is what the restart reads
    GPTTrainResult first = train_gpt(o);
    RANK_CHECK(first.losses.size() == 7u, "the first part ran ", first.losses.size(), " steps");
    o.stop_after = -1;
    GPTTrainResult rest = train_gpt(o);  // finds the checkpoint and resumes, as after a launcher restart
    RANK_CHECK(rest.first_step == 7, "resumed at step ", rest.first_step);
    RANK_CHECK(rest.losses.size() == 5u, "the resumed part ran ", rest.losses.size(), " steps");
    for (size_t s = 0; s < 7; ++s)
      RANK_CHECK(first.losses[s] == whole.losses[s], "step ", s, ": ", first.losses[s], " vs ", whole.losses[s]);
    for (size_t s = 0; s < 5; ++s)
      RANK_CHECK(rest.losses[s] == whole.losses[7 + s], "step ", 7 + s, ": resumed ", rest.losses[s],
                 ", uninterrupted ", whole.losses[7 + s]);
    RANK_CHECK(rest.val_losses.back() == whole.val_losses.back(), "final val_loss ", rest.val_losses.back().second,
               " vs ", whole.val_losses.back().second);
    dist::destroy_process_group();
  }, std::chrono::seconds(120));
  ::unlink(path);
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("gpt --dtype bfloat16 (autocast) on 2 ranks follows PyTorch's float32 losses within bf16's rounding") {
  Fixture fx = load_fixture();
  uint16_t port = testing::free_port();
  auto results = testing::run_ranks(2, [&](int rank) {
    init(2, rank, port);
    GPTTrainOptions o = fx.options;
    o.train.batch_size = fx.options.train.batch_size / 2;
    o.train.dtype = "bfloat16";
    GPTTrainResult r = train_gpt(o);
    RANK_CHECK(r.losses.size() == fx.losses.size(), "ran ", r.losses.size(), " steps");
    double worst = 0;
    for (size_t s = 0; s < fx.losses.size(); ++s) worst = std::max(worst, std::abs(r.losses[s] - fx.losses[s]));
    // bf16 keeps 8 bits of mantissa: the products' rounding moves each loss by a few thousandths.
    RANK_CHECK(worst <= 0.03, "largest difference from the float32 losses: ", worst);
    RANK_CHECK(worst > 0, "bfloat16 gave float32's losses exactly: autocast did not run");
    dist::destroy_process_group();
  }, std::chrono::seconds(180));
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}
