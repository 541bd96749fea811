// The data layer in one include: datasets, transforms and MapDataset, ChunkDataset, samplers, the
// DataLoader and the IDX (MNIST) reader.
#pragma once

#include "data/chunk_dataset.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/idx_dataset.h"
#include "data/map_dataset.h"
#include "data/sampler.h"
#include "data/stream_sampler.h"
#include "data/tensor_dataset.h"
#include "data/transforms.h"
#include "data/world.h"
