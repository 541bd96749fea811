// The optim layer in one include: optimizers and learning-rate schedulers.
#pragma once

#include "optim/adadelta.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
