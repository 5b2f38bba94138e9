"""No Python handle can crash the process (docs/lifetimes.md): every object the module hands out
either keeps what it points to alive or raises FailedPreconditionError naming what ended.

Each case keeps a handle past the end of its owner (the call that made it returned, the owner
was deleted and collected) and uses it. A use-after-free would kill the interpreter, so every
case runs in its own Python process; the test asserts that the process exited normally and
printed what the handle did."""

import os
import subprocess
import sys
import textwrap

import pytest

# Shared by every case: `expect_error(fn, cls, text)` prints "RAISED <class>: <message>" when
# fn() raises an instance of cls, and fails the case (exit 3) on anything else; `rt`, a
# two-device runtime; `kept`, a list for what a computation keeps.
PRELUDE = """
import gc
import numpy as np
import tessel

def expect_error(fn, cls, text):
    try:
        fn()
    except cls as e:
        assert text in str(e), f"{type(e).__name__}: {e!r} lacks {text!r}"
        print(f"RAISED {type(e).__name__}: {e}")
        return
    print("NOT RAISED")
    raise SystemExit(3)

def mesh_of(rt, n):
    names = [d.name for d in rt.devices()[:n]]
    return tessel.Mesh(["x"], np.arange(n), list(range(n)), names)

def vec(values):
    return np.asarray(values, np.float32)

rt = tessel.Runtime(num_cpu_devices=2)  # the runtime most cases end
kept = []  # what a computation keeps past its call
"""


def run_case(body, timeout=60):
    """Runs PRELUDE + body in a fresh interpreter; returns its stdout. A crash (a signal, an
    abort) or a failed assertion fails the test with the child's output."""
    # MPI's singleton init (the MPI case) refuses root without these.
    env = dict(os.environ, TESSEL_CPU_DEVICES="4", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, (
        f"exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.stdout


# ---- replicate: ReplicaContext --------------------------------------------------------------

KEEP_CONTEXTS = """
kept = {}
def body(ctx, inputs):
    kept[ctx.replica_id] = ctx
    return [ctx.all_reduce(inputs[0])]
outs = tessel.replicate(body, [[vec([1, 2]), vec([3, 4])]],
                        options=tessel.ReplicateOptions(tessel.ReplicateMetadata(2), runtime=rt))
assert tessel.to_host(outs[1][0]).tolist() == [4, 6]
ctx = kept[1]
x = outs[1][0]
"""


@pytest.mark.parametrize("collect", [False, True])
def test_replica_context_after_replicate_returned(collect):
    out = run_case(KEEP_CONTEXTS + textwrap.dedent(f"""
    if {collect}:
        del outs, kept[0], rt  # x keeps the runtime; the context does not need it
        gc.collect()
    # Plain values of the context stay readable.
    print("ids", ctx.replica_id, ctx.num_replicas, ctx.mesh.size)
    err = tessel.FailedPreconditionError
    expect_error(ctx.barrier, err, "used after replicate() returned (replica 1 of 2)")
    expect_error(lambda: ctx.all_reduce(x), err, "used after replicate() returned")
    expect_error(lambda: ctx.all_gather(x, 0), err, "ReplicaContext: all_gather")
    expect_error(lambda: ctx.broadcast(x, 0), err, "ReplicaContext: broadcast")
    expect_error(lambda: ctx.runtime, err, "ReplicaContext: runtime")
    print("done")
    """))
    assert "ids 1 2 1" in out
    assert out.count("RAISED FailedPreconditionError: ReplicaContext:") == 5
    assert "done" in out


def test_replica_context_used_from_another_replicate_call():
    # A context of an earlier call used inside a later one: still expired, the later call's
    # replicas are unaffected.
    out = run_case(KEEP_CONTEXTS + textwrap.dedent("""
    err = tessel.FailedPreconditionError
    def second(ctx2, inputs):
        expect_error(ctx.barrier, err, "used after replicate() returned (replica 1 of 2)")
        return [ctx2.all_reduce(inputs[0])]
    outs2 = tessel.replicate(second, [[vec([1]), vec([2])]],
                             options=tessel.ReplicateOptions(tessel.ReplicateMetadata(2),
                                                             runtime=rt))
    print("sums", [tessel.to_host(o[0]).tolist() for o in outs2])
    """))
    assert out.count("RAISED FailedPreconditionError") == 2
    assert "sums [[3.0], [3.0]]" in out


def test_replica_context_of_a_failed_replicate():
    out = run_case("""
    def body(ctx, inputs):
        kept.append(ctx)
        raise ValueError("boom")
    expect_error(lambda: tessel.replicate(
        body, [[vec([1]), vec([2])]],
        options=tessel.ReplicateOptions(tessel.ReplicateMetadata(2), runtime=rt)),
        ValueError, "boom")
    del rt
    gc.collect()
    for c in kept:
        expect_error(c.barrier, tessel.FailedPreconditionError, "used after replicate() returned")
    """)
    assert out.count("RAISED FailedPreconditionError") == 2


def test_replica_context_kept_from_compile_tracing():
    out = run_case("""
    def body(ctx, inputs):
        kept.append(ctx)
        return [ctx.all_reduce(inputs[0])]
    opts = tessel.CompileOptions(tessel.ReplicateMetadata(2), runtime=rt)
    r = tessel.compile(tessel.Function("keep", body), [tessel.InputSpec((2,))], opts)
    r.raise_if_error()
    ctx = kept[0]
    x = tessel.copy_to_mesh(vec([1, 2]), tessel.Layout.replicated(ctx.mesh, 1), rt)
    expect_error(lambda: ctx.all_reduce(x), tessel.FailedPreconditionError,
                 "used after compile() traced the function")
    outs = r.computation.run([[vec([1, 2]), vec([3, 4])]])
    print("sums", tessel.to_host(outs[0][0]).tolist())
    """)
    assert "RAISED FailedPreconditionError: ReplicaContext:" in out
    assert "sums [4.0, 6.0]" in out


# ---- alloc: ScopedAllocatorManager, ScopedAllocator, FusedAllReducer -----------------------


def test_scoped_allocator_from_get_after_cleanup_step():
    out = run_case("""
    mgr = tessel.ScopedAllocatorManager("dev0")
    mgr.add(1, 10, "grads", [(3,), (5,)], "f32", 2)
    s = mgr.get(1, 10)
    mgr.cleanup_step(1)
    assert mgr.num_live_scopes == 0
    # The handle keeps its scope alive: the manager forgot it, the scope still works.
    a = s.allocate(0, 12)
    b = s.allocate_shape(1, (5,))
    a.fill(7)
    print("scope", s.name, s.scope_id, s.calls_made, s.backing.numpy()[:3].tolist())
    s.close()
    expect_error(lambda: mgr.get(1, 10), tessel.NotFoundError, "no live ScopedAllocator")
    """)
    assert "scope grads 10 2 [7.0, 7.0, 7.0]" in out


def test_scoped_allocator_from_add_after_release_and_manager_gone():
    out = run_case("""
    mgr = tessel.ScopedAllocatorManager("dev0")
    s = mgr.add(1, 10, "grads", [(3,)], "f32", 1)
    t = s.allocate(0, 12)
    mgr.release(1, 10)
    del mgr
    gc.collect()
    s.reopen(1)
    t2 = s.allocate(0, 12)
    t2.fill(3)
    print("after release", s.closed, t.numpy().tolist(), s.fields[0].scope_id)
    s.close()
    """)
    assert "after release False [3.0, 3.0, 3.0] 11" in out


def test_fused_all_reducer_keeps_its_communicator():
    out = run_case("""
    comms = tessel.make_in_process_communicators(1)
    fused = tessel.FusedAllReducer(comms[0], [tessel.FusionTensor("a", (2,))])
    del comms
    gc.collect()
    fused.tensor_view(0).fill(5)
    out = fused.all_reduce_buckets(tessel.ReduceOp.SUM)
    print("sum", out[0].numpy().tolist())
    """)
    assert "sum [5.0, 5.0]" in out


# ---- comm: Communicator, CommunicatorPool ---------------------------------------------------


def test_communicator_whose_peers_were_deleted():
    out = run_case("""
    comms = tessel.make_in_process_communicators(2)
    me = comms[0]
    del comms
    gc.collect()
    expect_error(lambda: me.barrier(tessel.CollectiveOptions(timeout_seconds=0.5)),
                 tessel.DeadlineExceededError, "")
    """)
    assert "RAISED DeadlineExceededError" in out


def test_communicator_from_a_pool_that_was_deleted():
    out = run_case("""
    pool = tessel.CommunicatorPool()
    mesh = tessel.create_mesh([("x", 1)])
    comm = pool.get(mesh, ["x"], 0)
    del pool
    gc.collect()
    t = tessel.Tensor(vec([1, 2]))
    comm.all_reduce(t, t)
    print("size", comm.size, t.numpy().tolist())
    """)
    assert "size 1 [1.0, 2.0]" in out


def test_communicators_of_a_cluster_that_was_deleted():
    out = run_case("""
    import threading
    cluster = tessel.make_in_process_cluster(1)[0]
    comms = cluster.join(["a", "b"], [0, 0], 5.0)
    del cluster
    gc.collect()
    sums = []
    def rank(comm):
        t = tessel.Tensor(vec([1, 2]))
        comm.all_reduce(t, t, tessel.ReduceOp.SUM, tessel.CollectiveOptions(timeout_seconds=10))
        sums.append(t.numpy().tolist())
    threads = [threading.Thread(target=rank, args=(c,)) for c in comms]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    print("sums", sums)
    """)
    assert "sums [[2.0, 4.0], [2.0, 4.0]]" in out


# ---- runtime, dtensor: Device, DTensor, Tensor ----------------------------------------------


def test_devices_dtensors_and_components_outlive_their_runtime():
    out = run_case("""
    dev = rt.device(1)
    devs = rt.devices()
    d = tessel.copy_to_mesh(vec([1, 2, 3, 4]), tessel.Layout(["x"], mesh_of(rt, 2)), rt)
    part = d.component(1)
    on = d.device(0)
    del rt
    gc.collect()
    y = tessel.add(d, d)
    print("values", tessel.to_host(y).tolist(), part.numpy().tolist())
    print("devices", dev.name.endswith("CPU:1"), len(devs), on.index, d.runtime.num_devices())
    del d, y
    gc.collect()
    print("part", part.numpy().tolist(), dev.memory_stats()["live_bytes"] >= 0)
    """)
    assert "values [2.0, 4.0, 6.0, 8.0] [3.0, 4.0]" in out
    assert "devices True 2 0 2" in out
    assert "part [3.0, 4.0] True" in out


def test_an_op_result_keeps_its_runtime_alive():
    # tessel.add(d, d) takes the direct entry point (fast_calls.cpp): its result must keep the
    # Python-made runtime alive as the pybind11 overloads' results do.
    out = run_case("""
    d = tessel.copy_to_mesh(vec([1, 2, 3, 4]), tessel.Layout(["x"], mesh_of(rt, 2)), rt)
    y, z = tessel.add(d, d), tessel.add(x=d, y=d)
    del d, rt
    gc.collect()
    kept.extend(tessel.Runtime(num_cpu_devices=1) for _ in range(4))  # reuse freed memory
    w = tessel.add(y, z)  # runs on the runtime's devices
    print("values", tessel.to_host(w).tolist(), y.runtime.num_devices(), z.runtime.num_devices())
    """)
    assert "values [4.0, 8.0, 12.0, 16.0] 2 2" in out


def test_numpy_view_outlives_its_dtensor_and_runtime():
    out = run_case("""
    d = tessel.copy_to_mesh(vec([1, 2]), tessel.Layout(["unsharded"], mesh_of(rt, 2)), rt)
    view = d.component(0).numpy()
    del d, rt
    gc.collect()
    print("view", view.tolist())
    """)
    assert "view [1.0, 2.0]" in out


# ---- options holding a Runtime --------------------------------------------------------------


def test_replicate_options_keep_their_runtime():
    out = run_case("""
    opts = tessel.ReplicateOptions(tessel.ReplicateMetadata(2),
                                   runtime=tessel.Runtime(num_cpu_devices=2))
    gc.collect()
    outs = tessel.replicate(lambda ctx, ins: [ctx.all_reduce(ins[0])],
                            [[vec([1]), vec([2])]], options=opts)
    other = tessel.ReplicateOptions(tessel.ReplicateMetadata(2))
    other.runtime = tessel.Runtime(num_cpu_devices=2)
    attrs = tessel.OpAttrs()
    attrs.runtime = tessel.Runtime(num_cpu_devices=3)
    gc.collect()
    [tessel.Runtime(num_cpu_devices=1) for _ in range(4)]  # would reuse freed runtimes' memory
    print("runtime", other.runtime.num_devices(), other.runtime.device(1).name[-5:],
          attrs.runtime.device(2).name[-5:], tessel.to_host(outs[0][0]).tolist())
    """)
    assert "runtime 2 CPU:1 CPU:2 [3.0]" in out


def test_options_assigned_into_compile_options_keep_their_runtime():
    out = run_case("""
    opts = tessel.CompileOptions()
    opts.replicate = tessel.ReplicateOptions(tessel.ReplicateMetadata(2),
                                             runtime=tessel.Runtime(num_cpu_devices=2))
    gc.collect()
    r = tessel.compile(tessel.Function("sum", lambda ctx, ins: [ctx.all_reduce(ins[0])]),
                       [tessel.InputSpec((1,))], opts)
    outs = r.computation.run([[vec([1]), vec([2])]])
    print("sums", [tessel.to_host(o[0]).tolist() for o in outs])
    """)
    assert "sums [[3.0], [3.0]]" in out


def test_compiled_computation_keeps_its_runtime():
    out = run_case("""
    opts = tessel.CompileOptions(tessel.ReplicateMetadata(2),
                                 runtime=tessel.Runtime(num_cpu_devices=2))
    r = tessel.compile(tessel.Function("sum", lambda ctx, ins: [ctx.all_reduce(ins[0])]),
                       [tessel.InputSpec((1,))], opts)
    comp = r.computation
    del opts, r
    gc.collect()
    outs = comp.run([[vec([1]), vec([2])]])
    print("sums", [tessel.to_host(o[0]).tolist() for o in outs], comp.options.replicate.runtime.num_devices())
    """)
    assert "sums [[3.0], [3.0]] 2" in out


def test_cross_device_ops_keep_their_runtime():
    out = run_case("""
    ops = tessel.NcclAllReduce(runtime=tessel.Runtime(num_cpu_devices=2))
    gc.collect()
    names = ["/job:localhost/replica:0/task:0/device:CPU:0",
             "/job:localhost/replica:0/task:0/device:CPU:1"]
    value = tessel.PerReplica([vec([1]), vec([2])], names)
    result = ops.reduce(tessel.ReduceOp.SUM, value, value)
    print("reduced", [np.asarray(v).tolist() for v in result.values])
    """)
    assert "reduced [[3.0], [3.0]]" in out


# ---- dtensor: traced values, optimizers, tapes ---------------------------------------------


def test_traced_value_kept_after_compile():
    out = run_case("""
    def body(ctx, inputs):
        kept.append(inputs[0])
        return [inputs[0]]
    r = tessel.compile(tessel.Function("keep", body), [tessel.InputSpec((2,))],
                       tessel.CompileOptions(tessel.ReplicateMetadata(2), runtime=rt))
    r.raise_if_error()
    del r, rt
    gc.collect()
    x = kept[0]
    print("spec", x.shape, x.layout.rank)
    err = tessel.FailedPreconditionError
    expect_error(lambda: tessel.to_host(x), err, "a value traced by compile()")
    expect_error(lambda: tessel.add(x, x), err, "used outside its trace")
    expect_error(lambda: x.num_components, err, "it has no data")
    """)
    assert out.count("RAISED FailedPreconditionError") == 3


def test_optimizer_state_outlives_the_runtime_of_its_parameters():
    out = run_case("""
    layout = tessel.Layout(["unsharded"], mesh_of(rt, 2))
    opt = tessel.Adam(0.1)
    [w] = opt.apply([tessel.copy_to_mesh(vec([1, 2]), layout, rt)],
                    [tessel.copy_to_mesh(vec([1, 1]), layout, rt)])
    del rt
    gc.collect()
    [w] = opt.apply([w], [tessel.copy_to_mesh(vec([1, 1]), w.layout, w.runtime)])
    print("iterations", opt.iterations, [round(v, 3) for v in tessel.to_host(w).tolist()])
    del w, layout
    gc.collect()
    # Every DTensor of that runtime is gone but the optimizer kept the runtime (its state lives
    # there): a same-shaped list on another runtime of the same device names is a new list,
    # refused with a clear error instead of mixing the two runtimes' tensors.
    rt2 = tessel.Runtime(num_cpu_devices=2)
    l2 = tessel.Layout(["unsharded"], mesh_of(rt2, 2))
    expect_error(lambda: opt.apply([tessel.copy_to_mesh(vec([1, 2]), l2, rt2)],
                                   [tessel.copy_to_mesh(vec([1, 1]), l2, rt2)]),
                 ValueError, "lives on another runtime")
    print("on rt2", opt.iterations)
    """)
    assert "iterations 2 [0.8, 1.8]" in out
    assert "parameter 0 lives on another runtime than the optimizer's state" in out
    assert "on rt2 2" in out


def test_tape_records_survive_the_runtime():
    out = run_case("""
    w = tessel.copy_to_mesh(vec([1, 2]), tessel.Layout(["unsharded"], mesh_of(rt, 2)), rt)
    with tessel.GradientTape(persistent=True) as tape:
        tape.watch(w)
        loss = tessel.reduce_sum(tessel.multiply(w, w))
    del rt
    gc.collect()
    print("grad", tessel.to_host(tape.gradient(loss, w)).tolist())
    del w, loss
    gc.collect()
    tape.reset()
    print("reset")
    """)
    assert "grad [2.0, 4.0]" in out and "reset" in out


def test_mesh_scopes_and_tapes_deleted_while_open():
    out = run_case("""
    mesh = mesh_of(rt, 2)
    scope = tessel.default_mesh(mesh)
    scope.__enter__()
    tape = tessel.GradientTape()
    tape.__enter__()
    del scope, tape  # never exited
    gc.collect()
    w = tessel.copy_to_mesh(vec([1, 2]), tessel.Layout(["unsharded"], mesh), rt)
    y = tessel.multiply(w, w)  # records on no tape
    print("after", tessel.to_host(y).tolist(), tessel.get_default_mesh())
    """)
    assert "after [1.0, 4.0] None" in out  # the deleted scope closed


# ---- system --------------------------------------------------------------------------------


def test_host_and_coordinator_keep_their_owners():
    out = run_case("""
    host = tessel.Host(tessel.Runtime(num_cpu_devices=2),
                       tessel.make_in_process_system_channel(1))
    coordinator = tessel.SystemCoordinator(host)
    del host
    gc.collect()
    print("coordinator", coordinator.num_hosts)
    host = tessel.Host(tessel.Runtime(num_cpu_devices=2),
                       tessel.make_in_process_system_channel(1))
    rt = host.runtime
    channel = host.channel
    del host
    gc.collect()
    print("runtime", rt.num_devices(), channel.num_hosts)
    """)
    assert "coordinator 1" in out and "runtime 2 1" in out


def test_accelerator_system_runtime_outlives_a_shutdown():
    out = run_case("""
    tessel.initialize_accelerator_system(num_logical_cpu_devices=3)
    rt = tessel.accelerator_system_runtime()
    tessel.shutdown_accelerator_system()
    gc.collect()
    d = tessel.copy_to_mesh(vec([1, 2]), tessel.Layout(["unsharded"], mesh_of(rt, 2)), rt)
    print("after shutdown", rt.num_devices(), tessel.to_host(d).tolist())
    """)
    assert "after shutdown 3 [1.0, 2.0]" in out


# ---- values -----------------------------------------------------------------------------------


def test_graph_and_plans_outlive_their_owners():
    out = run_case("""
    r = tessel.compile(tessel.Function("twice", lambda ctx, ins: [tessel.add(ins[0], ins[0])]),
                       [tessel.InputSpec((2,))],
                       tessel.CompileOptions(tessel.ReplicateMetadata(2), runtime=rt))
    graph = r.computation.graph
    node = graph.nodes[0]
    del r, rt
    gc.collect()
    print("graph", graph.num_inputs, len(str(graph)) > 0, node.kind)
    mesh = tessel.create_mesh([("x", 2)])
    plan = tessel.plan_relayout((4,), tessel.Layout(["x"], mesh), tessel.Layout(["unsharded"], mesh))
    steps = plan.steps
    del plan, mesh
    gc.collect()
    print("plan", len(steps) >= 1)
    """)
    assert "graph 1 True" in out and "plan True" in out


# ---- MPI -------------------------------------------------------------------------------------


def test_mpi_objects_after_their_environment_was_destroyed():
    if not __import__("tessel").mpi_available():
        pytest.skip("built without MPI")
    out = run_case("""
    env = tessel.MpiEnvironment()
    comm = tessel.make_mpi_communicator(timeout_seconds=5)
    comm.barrier()
    del env  # MPI_Finalize
    gc.collect()
    err = tessel.FailedPreconditionError
    expect_error(comm.barrier, err, "MPI: used after MPI was finalized")
    t = tessel.Tensor(vec([1, 2]))
    # The failure aborted the group: later calls get AbortedError naming it.
    expect_error(lambda: comm.all_reduce(t, t), tessel.AbortedError, "used after MPI was finalized")
    expect_error(lambda: tessel.make_mpi_communicator(), err, "MPI is already finalized")
    del comm
    gc.collect()
    print("destroyed")
    """)
    assert out.count("RAISED FailedPreconditionError") == 2 and "destroyed" in out
    assert "RAISED AbortedError" in out
