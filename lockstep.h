// All of lockstep in one include, with `deps = ["//:lockstep"]` in Bazel: tensors and safetensors
// checkpoints, autograd, nn, optim, data and distributed (process groups, DDP, SyncBatchNorm's reducer).
#pragma once

#include "autograd/api.h"
#include "data/api.h"
#include "distributed/api.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tensor/api.h"
#include "tensor/safetensors.h"
