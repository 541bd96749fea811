// lockstep::dist in one include: rendezvous stores, process groups, the default group, DDP
// (init_process_group & co) with its communication hooks, SyncBatchNorm's reducer and the GradScaler's
// found-inf all-reduce. ProcessGroupNCCL is included where lockstep
// is built with NCCL (LOCKSTEP_WITH_NCCL), ProcessGroupMPI where it is built with Open MPI
// (LOCKSTEP_WITH_MPI).
#pragma once

#include "distributed/comm_hooks.h"
#include "distributed/ddp.h"
#include "distributed/found_inf.h"
#include "distributed/store/file_store.h"
#include "distributed/init.h"
#include "distributed/store/prefix_store.h"
#include "distributed/process_group.h"
#include "distributed/gloo/process_group_gloo.h"
#include "distributed/store/store.h"
#include "distributed/store/tcp_store.h"
#include "distributed/sync_batch_norm.h"
#include "distributed/work.h"

#ifdef LOCKSTEP_WITH_NCCL
#include "distributed/nccl/process_group_nccl.h"
#endif

#ifdef LOCKSTEP_WITH_MPI
#include "distributed/mpi/process_group_mpi.h"
#endif
