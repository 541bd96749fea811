// All of lockstep in one include, with `deps = ["//:lockstep"]` in Bazel: tensors and safetensors
// checkpoints, autograd, nn (with nn::utils' clip_grad_norm_ / clip_grad_value_ / parameters_to_vector),
// optim (with save_checkpoint / load_checkpoint), data and distributed (process groups, DDP, SyncBatchNorm's reducer).
#pragma once

#include "amp/grad_scaler.h"
#include "autograd/api.h"
#include "data/api.h"
#include "distributed/api.h"
#include "nn/api.h"
#include "nn/utils/clip_grad.h"
#include "nn/utils/convert_parameters.h"
#include "optim/api.h"
#include "optim/checkpoint.h"
#include "tensor/api.h"
#include "tensor/safetensors.h"
