// The umbrella header: every public header of tessel, layer by layer from the bottom
// (docs/architecture.md). Each layer includes only the layers listed before it.
#pragma once

#include "tessel/config.h"

// core
#include "tessel/core/allocator.h"
#include "tessel/core/blas.h"
#include "tessel/core/box.h"
#include "tessel/core/byte_size.h"
#include "tessel/core/device_name.h"
#include "tessel/core/dlpack.h"
#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/float16.h"
#include "tessel/core/host_memory.h"
#include "tessel/core/median.h"
#include "tessel/core/memory_space.h"
#include "tessel/core/parallel.h"
#include "tessel/core/partial_shape.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"

// mesh
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"
#include "tessel/mesh/mesh_spec.h"
#include "tessel/mesh/shard_map.h"
#include "tessel/mesh/shard_range.h"
#include "tessel/mesh/sharding_spec.h"
#include "tessel/mesh/topology.h"

// runtime
#include "tessel/runtime/busy_time.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/gpu.h"
#include "tessel/runtime/gpu_event.h"
#include "tessel/runtime/runtime.h"
#include "tessel/runtime/stream.h"

// comm
#include "tessel/comm/cluster.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/comm/mpi.h"
#include "tessel/comm/multi_client.h"
#include "tessel/comm/nccl.h"

// alloc
#include "tessel/alloc/fused_all_reduce.h"
#include "tessel/alloc/fusion.h"
#include "tessel/alloc/fusion_rules.h"
#include "tessel/alloc/scoped_allocator.h"
#include "tessel/alloc/scoped_allocator_manager.h"

// distribute
#include "tessel/distribute/communication_options.h"
#include "tessel/distribute/cross_device_ops.h"
#include "tessel/distribute/destinations.h"
#include "tessel/distribute/distributed_values.h"
#include "tessel/distribute/indexed_slices.h"
#include "tessel/distribute/variable_aggregation.h"

// dtensor
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/optimizers.h"
#include "tessel/dtensor/recompute_grad.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/dtensor/sharding_fallback.h"
#include "tessel/dtensor/tape_memory.h"

// replicate
#include "tessel/replicate/compile.h"
#include "tessel/replicate/device_assignment.h"
#include "tessel/replicate/execution_devices.h"
#include "tessel/replicate/graph.h"
#include "tessel/replicate/parameter_info.h"
#include "tessel/replicate/replica_context.h"
#include "tessel/replicate/replicate.h"
#include "tessel/replicate/replicate_metadata.h"
#include "tessel/replicate/replicated_io.h"

// system
#include "tessel/system/accelerator_system.h"
#include "tessel/system/mpi_system_channel.h"
#include "tessel/system/system.h"
#include "tessel/system/system_channel.h"
// checkpoint
#include "tessel/checkpoint/async_checkpointer.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/checkpoint/safetensors.h"
// embedding
#include "tessel/embedding/embedding_config.h"
#include "tessel/embedding/embedding_system.h"
#include "tessel/embedding/sharded_embedding.h"
#include "tessel/embedding/table_sharding.h"
