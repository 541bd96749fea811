// The nn layer in one include.
#pragma once

#include "autograd/api.h"
#include "nn/activation.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/sequential.h"
