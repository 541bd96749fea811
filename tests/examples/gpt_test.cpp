// examples/gpt against PyTorch and against itself, on CPU ranks over loopback:
//  - parity: the first 20 step losses of a tiny GPT equal PyTorch's (tests/fixtures/gpt_parity.json, written
//    by tools/fixtures/make_gpt_fixture.sh with tools/twins/gpt_twin.py from the same initial weights and batches) to
//    1e-4 relative, on 1 rank at batch 4, on 2 ranks at batch 2, and on 2 ranks at batch 1 with 2
//    micro-batches under no_sync: the same global batch every time;
//  - resume: a run stopped after its checkpoint and resumed continues with the losses of a run never
//    stopped, bit for bit, dropout included (batches and masks are functions of seed, rank and step), in
//    each --shard mode; ZeRO's and DDP's checkpoints resume each other, and fully_shard's at another
//    world size;
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
#include "tests/util/test_util.h"

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

namespace {

// What a run of train_gpt on `world` ranks gave (rank 0's result; every rank checks its own).
struct Run {
  int64_t first_step = 0;
  std::vector<double> losses;
  double val = 0;  // the last validation loss (0 for a run stopped early)
};

Run train_ranks(int world, const GPTTrainOptions& o) {
  testing::TempDir out("gpt_test_run");
  const std::string file = out.path + "/run.txt";
  const uint16_t port = testing::free_port();
  auto results = testing::run_ranks(world, [&](int rank) {
    init(world, rank, port);
    GPTTrainResult r = train_gpt(o);
    if (rank == 0) {
      std::ofstream f(file);
      f.precision(17);
      f << r.first_step << ' ' << (r.val_losses.empty() ? 0.0 : r.val_losses.back().second) << ' ' << r.losses.size();
      for (double l : r.losses) f << ' ' << l;
    }
    dist::destroy_process_group();
  }, std::chrono::seconds(120));
  REQUIRE_MESSAGE(testing::all_ok(results), testing::failures(results));
  std::ifstream f(file);
  Run run;
  size_t n = 0;
  f >> run.first_step >> run.val >> n;
  run.losses.resize(n);
  for (auto& l : run.losses) f >> l;
  REQUIRE(!f.fail());
  return run;
}

// 12 steps with dropout at 2 ranks x 2 rows (the fixture's global batch), --shard `shard`.
GPTTrainOptions resume_options(const std::string& shard) {
  GPTTrainOptions o = load_fixture().options;
  o.train.steps = 12;
  o.train.batch_size = 2;
  o.model.dropout = 0.1;  // masks must be redrawn the same after the restart too
  o.shard = shard;
  return o;
}

// Runs 7 steps of `o` at `world` ranks with checkpoints, then resumes from the checkpoint with `resumed`
// at `resumed_world` ranks, as after a launcher restart (the checkpoint found, no --resume), and checks the
// resumed steps' losses and final validation loss against `whole` (exactly, or to `rel`).
void check_resume(const GPTTrainOptions& o, int world, GPTTrainOptions resumed, int resumed_world, const Run& whole,
                  double rel) {
  testing::TempDir dir("gpt_test_ckpt");
  const std::string path = dir.path + (o.shard == "full" ? "/ck" : "/ck.safetensors");
  GPTTrainOptions first = o;
  first.train.checkpoint = path;
  first.checkpoint_interval = 2;
  first.stop_after = 7;  // checkpoints after steps 1, 3, 5 and 6; the last one is what the restart reads
  auto close = [&](double x, double y) { return rel == 0 ? x == y : std::abs(x - y) <= rel * std::abs(y); };
  Run a = train_ranks(world, first);
  REQUIRE(a.losses.size() == 7u);
  for (size_t s = 0; s < 7; ++s)
    CHECK_MESSAGE(close(a.losses[s], whole.losses[s]), "step ", s, ": ", a.losses[s], " vs ", whole.losses[s]);
  resumed.train.checkpoint = path;
  resumed.checkpoint_interval = 2;
  Run b = train_ranks(resumed_world, resumed);
  CHECK(b.first_step == 7);
  REQUIRE(b.losses.size() == 5u);
  for (size_t s = 0; s < 5; ++s)
    CHECK_MESSAGE(close(b.losses[s], whole.losses[7 + s]), "step ", 7 + s, ": resumed ", b.losses[s],
                  ", uninterrupted ", whole.losses[7 + s]);
  CHECK_MESSAGE(close(b.val, whole.val), "final val_loss: resumed ", b.val, ", uninterrupted ", whole.val);
}

}  // namespace

// A run stopped after a checkpoint and resumed ends where the uninterrupted run ends, bit for bit, in
// every --shard mode: DDP's and ZeRO's one file (ZeRO's state consolidated to rank 0 and shared out again
// on loading), fully_shard's sharded directory.
TEST_CASE("a gpt run stopped after a checkpoint and resumed continues with the uninterrupted run's losses") {
  for (const std::string shard : {"none", "optimizer", "full"}) {
    CAPTURE(shard);
    GPTTrainOptions o = resume_options(shard);
    const Run whole = train_ranks(2, o);
    REQUIRE(whole.losses.size() == 12u);
    check_resume(o, 2, o, 2, whole, 0);
  }
}

// ZeRO's consolidated checkpoint has DDP's keys: each resumes the other's (the same steps up to the
// rounding of a sharded step: AdamW's arithmetic per element is the same, so to 1e-6).
TEST_CASE("gpt checkpoints of --shard optimizer resume under --shard none and the other way round") {
  const Run whole = train_ranks(2, resume_options("none"));
  check_resume(resume_options("optimizer"), 2, resume_options("none"), 2, whole, 1e-6);
  check_resume(resume_options("none"), 2, resume_options("optimizer"), 2, whole, 1e-6);
}

// A sharded checkpoint saved at 2 ranks resumes at 1 rank x 4 rows: the same global batch, without dropout
// (its masks are drawn per rank), so the same losses up to the order of the sums.
TEST_CASE("a gpt --shard full checkpoint saved at 2 ranks resumes at 1 rank on the same losses") {
  GPTTrainOptions o = resume_options("full");
  o.model.dropout = 0;
  const Run whole = train_ranks(2, o);
  GPTTrainOptions one = o;
  one.train.batch_size = 4;
  check_resume(o, 2, one, 1, whole, 1e-5);
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
