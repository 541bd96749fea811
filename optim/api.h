// The optim layer in one include: optimizers and learning-rate schedulers.
#pragma once

#include "optim/adadelta.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/adamax.h"
#include "optim/lbfgs.h"
#include "optim/lr_scheduler.h"
#include "optim/nadam.h"
#include "optim/optimizer.h"
#include "optim/radam.h"
#include "optim/reduce_lr_on_plateau.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
