// ReduceLROnPlateau on hand-worked metric sequences (each matches torch.optim.lr_scheduler's): patience,
// relative and absolute thresholds, cooldown, min_lr (scalar and per group), eps, NaN metrics, the
// state_dict round trip, LibTorch's ReduceLROnPlateauScheduler spelling and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/api.h"
#include "optim/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;

namespace {

Tensor leaf() { return zeros({1}).set_requires_grad(); }

}  // namespace

TEST_CASE("ReduceLROnPlateau (min, rel): patience 2, cooldown 1, min_lr 0.02") {
  optim::SGD sgd({leaf()}, optim::SGDOptions(0.1));
  optim::ReduceLROnPlateau plateau(
      sgd, optim::ReduceLROnPlateauOptions().factor(0.5).patience(2).threshold(0.1).cooldown(1).min_lr(0.02));
  CHECK(plateau.get_last_lr() == std::vector<double>{0.1});
  // Better means below best * 0.9. 1.0 sets best; 0.95, 0.92, 0.91 are three bad epochs (> patience):
  // lr 0.05 and one epoch of cooldown, in which 0.5 becomes best. Then 0.6 is bad: three bad epochs
  // halve the lr again (0.025), the next one is cooldown, three more reach the floor 0.02 (0.0125 is
  // below it), and after that a reduction would not change the lr.
  const std::vector<double> metrics = {1.0, 0.95, 0.92, 0.91, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6};
  const double a = 0.1, b = a * 0.5, c = b * 0.5;
  const std::vector<double> want = {a, a, a, b, b, b, b, c, c, c, c, 0.02, 0.02, 0.02, 0.02, 0.02};
  for (size_t i = 0; i < metrics.size(); ++i) {
    plateau.step(metrics[i]);
    INFO("step ", i + 1);
    CHECK(sgd.options().lr() == want[i]);
    CHECK(plateau.get_last_lr() == std::vector<double>{want[i]});
  }
  CHECK(plateau.best() == 0.5);
  CHECK(plateau.last_epoch() == 16);
  CHECK(plateau.num_bad_epochs() == 0);  // reset by the last (no-op) reduction
  CHECK(plateau.in_cooldown());
}

TEST_CASE("ReduceLROnPlateau (max, abs): patience 0, per-group min_lr, eps, NaN") {
  optim::SGD sgd(std::vector<optim::SGD::ParamGroup>{{{leaf()}, optim::SGDOptions(1.0)}, {{leaf()}, optim::SGDOptions(1.0)}});
  optim::ReduceLROnPlateau plateau(sgd, optim::ReduceLROnPlateauOptions()
                                            .mode("max")
                                            .factor(0.1)
                                            .patience(0)
                                            .threshold(0.5)
                                            .threshold_mode("abs")
                                            .min_lr(std::vector<double>{0.001, 0.5}));
  // Better means above best + 0.5: 10 (best), 10.4 (bad: reduce, group 1 stops at 0.5), 10.6 (best),
  // 10.6 (bad: group 0 to 0.1 * 0.1, group 1 already at its floor).
  plateau.step(10);
  CHECK(plateau.get_last_lr() == std::vector<double>{1.0, 1.0});
  plateau.step(10.4);
  CHECK(plateau.get_last_lr() == std::vector<double>{0.1, 0.5});
  plateau.step(10.6);
  CHECK(plateau.get_last_lr() == std::vector<double>{0.1, 0.5});
  CHECK(plateau.best() == 10.6);
  plateau.step(10.6);
  CHECK(plateau.get_last_lr() == std::vector<double>{0.1 * 0.1, 0.5});
  plateau.step(std::numeric_limits<double>::quiet_NaN());  // never better
  CHECK(sgd.options(0).lr() == 0.1 * 0.1 * 0.1);
  CHECK(plateau.best() == 10.6);

  // A reduction by eps or less is skipped: 1.5e-8 -> 7.5e-9 changes it by 7.5e-9 < 1e-8.
  optim::SGD tiny({leaf()}, optim::SGDOptions(1.5e-8));
  optim::ReduceLROnPlateau small(tiny, optim::ReduceLROnPlateauOptions().factor(0.5).patience(0));
  small.step(1);
  small.step(2);
  CHECK(tiny.options().lr() == 1.5e-8);
}

TEST_CASE("ReduceLROnPlateau's state_dict resumes; LibTorch's spelling behaves the same") {
  optim::SGD sgd({leaf()}, optim::SGDOptions(1.0));
  optim::ReduceLROnPlateau plateau(sgd, optim::ReduceLROnPlateauOptions().patience(1).cooldown(2));
  for (double m : {3.0, 2.0, 2.5, 2.5}) plateau.step(m);
  CHECK(sgd.options().lr() == 0.1);
  optim::StateDict saved = plateau.state_dict();

  optim::SGD sgd2({leaf()}, optim::SGDOptions(0.1));
  optim::ReduceLROnPlateau resumed(sgd2, optim::ReduceLROnPlateauOptions());
  resumed.load_state_dict(saved);
  CHECK(resumed.options().patience() == 1);
  CHECK(resumed.cooldown_counter() == 2);
  CHECK(resumed.best() == 2.0);
  CHECK(resumed.last_epoch() == 4);
  for (double m : {2.5, 2.5, 2.5, 2.5}) {
    plateau.step(m);
    resumed.step(m);
    CHECK(resumed.get_last_lr() == plateau.get_last_lr());
  }
  CHECK(sgd2.options().lr() == 0.1 * 0.1);

  optim::SGD sgd3({leaf()}, optim::SGDOptions(1.0));
  optim::ReduceLROnPlateauScheduler libtorch(sgd3, optim::ReduceLROnPlateauScheduler::max, 0.5, 0, 1e-4,
                                             optim::ReduceLROnPlateauScheduler::abs, 0, {0.3f});
  libtorch.step(1.0f);
  libtorch.step(0.5f);
  CHECK(sgd3.options().lr() == 0.5);
  libtorch.step(0.5f);
  CHECK(sgd3.options().lr() == static_cast<double>(0.3f));

  optim::ReduceLROnPlateau maxed(sgd3, optim::ReduceLROnPlateauOptions().mode("max"));
  CHECK(error_of([&] { maxed.load_state_dict(saved); }).find("the state_dict is for mode 'min'") != std::string::npos);
}

TEST_CASE("ReduceLROnPlateau rejects bad options in PyTorch's words") {
  optim::SGD sgd({leaf()}, optim::SGDOptions(1.0));
  CHECK(error_of([&] { optim::ReduceLROnPlateau(sgd, optim::ReduceLROnPlateauOptions().factor(1.0)); })
            .find("Factor should be < 1.0.") != std::string::npos);
  CHECK(error_of([&] { optim::ReduceLROnPlateau(sgd, optim::ReduceLROnPlateauOptions().mode("mid")); })
            .find("mode mid is unknown!") != std::string::npos);
  CHECK(error_of([&] { optim::ReduceLROnPlateau(sgd, optim::ReduceLROnPlateauOptions().threshold_mode("pct")); })
            .find("threshold mode pct is unknown!") != std::string::npos);
  CHECK(error_of([&] {
          optim::ReduceLROnPlateau(sgd, optim::ReduceLROnPlateauOptions().min_lr(std::vector<double>{0.1, 0.2}));
        }).find("expected 1 min_lrs, got 2") != std::string::npos);
  // A group added after construction: a scalar min_lr extends to it, a per-group one is an error.
  optim::ReduceLROnPlateau per_group(sgd, optim::ReduceLROnPlateauOptions().patience(0).min_lr(std::vector<double>{0.0}));
  optim::ReduceLROnPlateau scalar(sgd, optim::ReduceLROnPlateauOptions().patience(0).min_lr(0.05));
  sgd.add_param_group({leaf()}, optim::SGDOptions(1.0));
  per_group.step(1);
  CHECK(error_of([&] { per_group.step(2); }).find("The number of param groups in the `optimizer` (2) differs") !=
        std::string::npos);
  scalar.step(1);
  scalar.step(2);
  CHECK(scalar.get_last_lr() == std::vector<double>{0.1, 0.1});
}
