"""tessel: distributed tensors on a device mesh.

The Mesh/Layout API mirrors TensorFlow DTensor's Python API (``tf.experimental.dtensor``):
same names, argument order and error texts. Errors are raised as tessel's own classes, each
also a builtin (``InvalidArgumentError`` is a ``ValueError``, ``DeadlineExceededError`` a
``TimeoutError``, ...), so ``except ValueError`` works as it does with TensorFlow.

Tensors convert to and from numpy (``tessel.tensor(array)``, ``Tensor.numpy()``); numpy has no
bfloat16, so a bf16 tensor's ``numpy()`` is a float32 array.
"""

import os as _os


from tessel._tessel import (  # multi-process: MPI, clusters, client configuration
    ClientConfig,
    Cluster,
    MpiEnvironment,
    _create_distributed_mesh_for_client,
    client_config,
    cluster_of,
    make_hierarchical_communicators,
    make_in_process_cluster,
    make_mpi_cluster,
    make_mpi_communicator,
    mpi_available,
    mpi_library_version,
    mpi_rank,
    mpi_size,
    set_cluster,
)
from tessel._tessel import (
    AbortedError,
    Algorithm,
    AlreadyExistsError,
    CollectiveOptions,
    Communicator,
    CommunicatorPool,
    DeadlineExceededError,
    DEFAULT_PER_PROCESS_MEMORY_FRACTION,
    Device,
    DeviceName,
    Error,
    ErrorCode,
    FailedPreconditionError,
    GpuEvent,
    GroupPosition,
    InternalError,
    DataLossError,
    InvalidArgumentError,
    Layout,
    LayoutType,
    MATCH,
    Mesh,
    MemorySpace,
    MeshDimension,
    NotFoundError,
    OutOfRangeError,
    ReduceOp,
    ResourceExhaustedError,
    Runtime,
    ShardMap,
    ShardingSpec,
    Tensor,
    UNSHARDED,
    UnavailableError,
    UnimplementedError,
    __version__,
    algorithm_from_name,
    algorithm_name,
    allclose,
    BlasInfo,
    blas_info,
    bf16_bits_to_float,
    collective_groups,
    crc32c,
    crc32c_combine,
    default_collective_timeout,
    dtype_name,
    dtype_size,
    error_code_name,
    from_dlpack,
    f16_bits_to_float,
    float_to_bf16_bits,
    float_to_f16_bits,
    format_bytes,
    group_position,
    host_available_memory,
    host_memory_limit,
    host_memory_stats,
    intra_op_threads,
    is_floating,
    machine_cores,
    MatmulPrecision,
    matmul_precision,
    matmul_precision_from_name,
    matmul_precision_name,
    enable_tensor_float_32_execution,
    tensor_float_32_execution_enabled,
    set_matmul_precision,
    make_in_process_communicators,
    median,
    make_nccl_communicators,
    nccl_available,
    nccl_version,
    built_with_cuda,
    visible_gpu_count,
    parse_byte_size,
    parse_mesh,
    reduce_op_from_name,
    reduce_op_name,
    reset_host_peak_memory,
    set_host_memory_limit,
    set_intra_op_threads,
    shard_chunk_size,
    shard_range,
    tensor,
    visualize,
)

# Cross-device ops with TF's tf.distribute names (bind_distribute.cpp).
from tessel._tessel import (
    AllReduceCrossDeviceOps,
    CollectiveAllReduce,
    CommunicationImplementation,
    CommunicationOptions,
    CrossDeviceOps,
    DistributedValues,
    HierarchicalCopyAllReduce,
    IndexedSlices,
    Mirrored,
    NcclAllReduce,
    PerReplica,
    ReductionToOneDevice,
    group_by_size,
    reduce_non_distributed_value,
    split_into_packs,
)

# TF's helpers around cross-device ops (bind_distribute.cpp, tf_helpers.h, collective_keys.h).
from tessel._tessel import (
    CollectiveHints,
    CollectiveKeys,
    HierarchicalCopyStep,
    Hints,
    VariableAggregation,
    collective_hints,
    hierarchical_copy_plan,
    reduce_op_from_variable_aggregation,
    select_cross_device_ops,
)

# Scoped allocator, fusion planner and fused batch all-reduce (bind_alloc.cpp).
from tessel._tessel import (
    FusedAllReducer,
    FusionBucket,
    FusionOptions,
    FusionPlan,
    FusionTensor,
    ScopedAllocator,
    ScopedAllocatorManager,
    ScopedField,
    plan_fusion,
    scoped_layout,
)

# DTensor with TF's tf.experimental.dtensor names, relayout and its planner (bind_dtensor.cpp).
# `visualize` (above) also takes a DTensor.
from tessel._tessel import (
    Box,
    DTensor,
    DefaultMeshScope,
    RelayoutPlan,
    RelayoutStep,
    RelayoutTimeoutScope,
    call_with_layout,
    check_layout,
    copy_to_mesh,
    default_mesh,
    default_relayout_timeout,
    scoped_relayout_timeout,
    device_name,
    num_clients,
    client_id,
    job_name,
    full_job_name,
    jobs,
    _create_distributed_mesh,
    copy_box,
    execute_relayout,
    fetch_layout,
    full_tensor,
    get_default_mesh,
    intersect,
    is_dtensor,
    pack,
    plan_relayout,
    relayout,
    relayout_like,
    resolve_match,
    to_host,
    unpack,
)

# SPMD ops with TF's names (bind_ops.cpp): elementwise, matmul/einsum, reductions, nn (conv2d,
# max_pool2d and avg_pool2d among them), shape,
# embedding_lookup, creation, gather / take_along_axis / scatter_add / pad / cumsum / one_hot /
# top_k (which returns the namedtuple TopK); DTensor gets the operators + - * / @ ** < <= > >=
# == != unary -, abs() and indexing with slices. zeros, random_uniform and random_normal without
# a Layout are the host forms (tessel.Tensor).
# Every registered op that bind_ops.cpp binds under the op's own name (add, exp, matmul, zeros,
# ...) is exported by that name below, so that a new op needs no line here; the list is the rest.
from tessel._tessel import (
    OpAttrs,
    OpRegistry,
    ShardingDecision,
    TensorSpec,
    TopK,
    call_op,
    concat,
    has_gpu_kernel,
    host_staged_kernel_calls,
    ones_like,
    op_names,
    plan_op,
    replicate_fallback,
    set_replicate_fallback,
    zeros_like,
)
from tessel import _tessel as _native

globals().update((_name, getattr(_native, _name)) for _name in op_names()
                 if hasattr(_native, _name))

# Ops without a sharding rule for their inputs' layouts: the fallback's records and strict mode
# (bind_sharding_fallback.cpp).
from tessel._tessel import (
    FallbackRecord,
    reset_sharding_fallbacks,
    set_sharding_fallback_strict,
    sharding_fallback_strict,
    sharding_fallbacks,
    sharding_fallbacks_text,
)

# Gradients, optimizers, batched relayout (bind_autodiff.cpp).
from tessel._tessel import (
    Adam,
    AdamW,
    GradientTape,
    OpProfile,
    OpProfileRow,
    Optimizer,
    ProfilePhase,
    RelayoutStats,
    SGD,
    TapeMemoryStats,
    WarmupCosineDecay,
    clip_by_global_norm,
    op_profile_enabled,
    recompute_grad,
    relayout_batch,
    relayout_stats,
    reset_tape_memory_peak,
    start_op_profile,
    stop_op_profile,
    tape_memory_stats,
    value_and_grad,
)

full = Tensor.full
from_numpy = Tensor.from_numpy

# The system lifecycle (seed 102) and TF DTensor's initialize_accelerator_system /
# shutdown_accelerator_system (bind_system.cpp).
from tessel._tessel import (
    AcceleratorSystemInfo,
    Host,
    HostConfiguration,
    HostState,
    SystemChannel,
    SystemCoordinator,
    SystemState,
    Topology,
    accelerator_system_info,
    accelerator_system_runtime,
    initialize_accelerator_system,
    is_accelerator_system_initialized,
    make_in_process_system_channel,
    make_mpi_system_channel,
    shutdown_accelerator_system,
    start_system,
    stop_system,
)

# Replication metadata and device assignment (seed 105; bind_replicate.cpp).
from tessel._tessel import (
    DeviceAssignment,
    DeviceOrderMode,
    ExecutionDevice,
    ExecutionDevices,
    ReplicateMetadata,
    SINGLE_CORE_ASSIGNMENT,
    StepMarkerLocation,
    compilation_and_execution_devices,
    step_marker_location_from_name,
    step_marker_location_name,
)

# replicate(): one computation on N replicas, ReplicaContext, replicated inputs and outputs
# (seed 105; bind_replicate.cpp).
from tessel._tessel import (
    HandleShapeAndType,
    ParameterInfo,
    PartialShape,
    ReplicaContext,
    ReplicatedHandleData,
    ReplicatedVariable,
    ReplicateOptions,
    dummy_input,
    merge_replicated_handle_shapes_and_types,
    merge_replicated_input_shapes,
    merge_variable_handles,
    replica_device_names,
    replicate,
    replicated_output,
)

# compile(): trace a replica computation once, replay it on every replica (bind_compile.cpp).
from tessel._tessel import (
    CollectiveKind,
    CompilationResult,
    CompileCacheStats,
    CompileOptions,
    CompiledComputation,
    Function,
    Graph,
    GraphNode,
    GraphNodeKind,
    InputSpec,
    clear_compile_cache,
    compile,
    compile_cache_stats,
)

# Number of virtual CPU devices create_mesh() uses when no devices are given.
_DEFAULT_CPU_DEVICES = 4


def _num_devices(device_type):
    if device_type.upper() != "CPU":
        return -1
    return int(_os.environ.get("TESSEL_CPU_DEVICES", _DEFAULT_CPU_DEVICES))


def create_mesh(mesh_dims=None, mesh_name="", devices=None, device_type=None,
                use_xla_spmd=False):
    """A mesh over local devices, as TF's ``dtensor.create_mesh``.

    Args:
      mesh_dims: list of ``(name, size)`` pairs or a ``{name: size}`` dict; default
        ``[('x', number of devices)]``; a size of -1 in a 1-D spec means all devices.
      mesh_name: the mesh name.
      devices: device names such as ``'CPU:0'`` (prefixed with
        ``/job:localhost/replica:0/task:0/device:``) or full names. Default: the first
        ``TESSEL_CPU_DEVICES`` (4) virtual devices of ``device_type``.
      device_type: ``'CPU'`` (default), ``'GPU'``, ...
      use_xla_spmd: TF's flag; only valid on TPU meshes.
    """
    if isinstance(mesh_dims, dict):
        mesh_dims = list(mesh_dims.items())
    if devices is None:
        device_type = (device_type or "CPU").upper()
        return Mesh.create(mesh_dims or [], device_type, mesh_name, _num_devices(device_type),
                           use_xla_spmd)
    return Mesh.create_on_devices(mesh_dims or [], devices, mesh_name, use_xla_spmd)


def create_distributed_mesh(mesh_dims, mesh_name="", local_devices=None, device_type=None,
                            use_xla_spmd=False, client=None):
    """A mesh over every client's devices, as TF's ``dtensor.create_distributed_mesh``.

    Args:
      mesh_dims: list of ``(name, size)`` pairs or a ``{name: size}`` dict; their product must be
        ``num_clients()`` x the number of local devices.
      local_devices: this client's devices (``'CPU:0'`` or full names). Default: the first
        ``TESSEL_CPU_DEVICES`` (4) virtual devices of ``device_type``.
      client: a ``ClientConfig`` naming the client instead of the environment (simulated
        clients in one process, one ``Runtime`` each; see ``make_in_process_cluster``).
    """
    if isinstance(mesh_dims, dict):
        mesh_dims = list(mesh_dims.items())
    if local_devices is None:
        device_type = (device_type or "CPU").upper()
        local_devices = ["%s:%d" % (device_type, i) for i in range(_num_devices(device_type))]
    if client is not None:
        return _create_distributed_mesh_for_client(mesh_dims, local_devices, client, mesh_name,
                                                   use_xla_spmd)
    return _create_distributed_mesh(mesh_dims, local_devices, mesh_name, use_xla_spmd)


# Sharded checkpoints (bind_checkpoint.cpp): the submodule tessel.checkpoint with Orbax's names
# (save, restore, CheckpointManager, metadata; plus verify), and the safetensors reader.
from tessel._tessel import (  # noqa: E402
    SafetensorsEntry,
    SafetensorsFile,
    SafetensorsHeader,
    checkpoint,
    dtype_from_safetensors_name,
    safetensors_dtype_name,
)

# Sharded embedding tables (bind_embedding.cpp): TF's TPUEmbeddingConfiguration, the lifecycle's
# step 6 (configure_embedding, is_embedding_initialized) and ShardedEmbedding.
from tessel._tessel import (  # noqa: E402
    EmbeddingCombiner,
    EmbeddingConfiguration,
    EmbeddingMode,
    EmbeddingOptimizer,
    EmbeddingStepStats,
    FeatureDescriptor,
    OptimizationParameters,
    RaggedIds,
    RowPiece,
    ShardedEmbedding,
    ShardingStrategy,
    TableDescriptor,
    TablePlacement,
    TableSharding,
    combiner_from_name,
    combiner_name,
    configure_embedding,
    embedding,
    embedding_mode_name,
    host_embedding,
    is_embedding_initialized,
    optimizer_name,
    sharding_strategy_name,
    table_placement_name,
)

# `from tessel import *` leaves Python's builtins alone: tessel.compile, tessel.slice,
# tessel.abs and tessel.pow are reached through the module (as numpy leaves out its `sum`-like
# names).
__all__ = [name for name in dir()
           if not name.startswith("_") and name not in ("compile", "slice", "abs", "pow")]
