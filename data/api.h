// The data layer in one include: datasets, samplers, the DataLoader and the IDX (MNIST) reader.
#pragma once

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/idx_dataset.h"
#include "data/sampler.h"
#include "data/tensor_dataset.h"
#include "data/world.h"
