// The tensor layer in one include: Tensor, dtypes, devices, factories, raw ops, the generator.
#pragma once

#include "tensor/backend.h"
#include "common/check.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/factory.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
