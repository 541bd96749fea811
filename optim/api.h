// The optim layer in one include.
#pragma once

#include "optim/optimizer.h"
#include "optim/sgd.h"
