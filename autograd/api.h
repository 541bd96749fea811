// The autograd layer in one include: grad mode, autocast, the engine and hooks, differentiable ops.
#pragma once

#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/api.h"
