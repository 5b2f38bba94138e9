"""replicate() from several Python threads at once over the same devices, and a replica whose
own code overruns the call's deadline (replicate.h: "Concurrency and deadlines")."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tessel


def options(replicas, timeout):
    return tessel.ReplicateOptions(tessel.ReplicateMetadata(replicas), timeout=timeout)


def chained_all_reduces(ctx, inputs):
    x = inputs[0]
    for _ in range(4):
        x = ctx.all_reduce(tessel.multiply(x, 0.5))
    return [x]


def bound(timeout):
    """What every call must keep: its timeout + 10 %, plus slack for a loaded machine."""
    return timeout * 1.1 + 0.15


def test_four_threads_of_replicate_on_the_same_devices_all_succeed_within_their_timeout():
    timeout = 2.0
    results, errors, took = [], [], []
    lock = threading.Lock()

    def caller(t):
        for i in range(3):
            a = float(10 * t + i)
            xs = [np.array([a, 1], np.float32), np.array([a, 3], np.float32)]
            start = time.monotonic()
            try:
                outs = tessel.replicate(chained_all_reduces, [xs], options=options(2, timeout))
                values = [tessel.to_host(out[0]).tolist() for out in outs]
            except tessel.Error as e:
                with lock:
                    errors.append(e)
                continue
            finally:
                with lock:
                    took.append(time.monotonic() - start)
            with lock:
                results.append((a, values))

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert len(results) == 12
    for a, values in results:  # (x0 + x1) / 2 after the first all_reduce, a fixed point after
        assert values == [[a, 2.0], [a, 2.0]]
    assert max(took) < bound(timeout)


def test_user_code_past_the_deadline_is_named_at_the_deadline_and_its_next_collective_aborts():
    timeout = 0.3
    late = {}
    done = threading.Event()

    def body(ctx, inputs):
        out = [ctx.all_reduce(inputs[0])]
        if ctx.replica_id == 1:
            time.sleep(0.8)  # past the deadline
            try:
                ctx.barrier()
            except tessel.Error as e:
                late["error"] = e
            finally:
                done.set()
        return out

    start = time.monotonic()
    with pytest.raises(tessel.DeadlineExceededError,
                       match=r"replicate: replica 1: still running its computation at the call's "
                             r"deadline \(300 ms\)"):
        tessel.replicate(body, [[np.ones(2, np.float32), np.ones(2, np.float32)]],
                         options=options(2, timeout))
    assert time.monotonic() - start < bound(timeout)
    # The devices serve other calls while the late replica sleeps.
    outs = tessel.replicate(chained_all_reduces,
                            [[np.array([1], np.float32), np.array([3], np.float32)]],
                            options=options(2, 2.0))
    assert tessel.to_host(outs[0][0]).tolist() == [2.0]
    assert done.wait(10)
    assert isinstance(late["error"], tessel.AbortedError)
    assert "replicate() passed its deadline of 300 ms with replica 1 late" in str(late["error"])


@pytest.mark.parametrize("wake", ["after_exit", "during_finalization"])
def test_interpreter_exit_with_a_late_replica_still_in_python(wake):
    # The late replica's thread sleeps in Python when the script ends: it either outlives the
    # process (after_exit) or wakes while the interpreter finalizes (a global's __del__ keeps
    # finalization busy), when CPython ends it. Neither may crash or hang the exit.
    sleep, teardown = (30.0, 0.0) if wake == "after_exit" else (0.5, 1.0)
    script = textwrap.dedent(f"""
        import time
        import numpy as np
        import tessel

        def body(ctx, inputs):
            x = ctx.all_reduce(inputs[0])
            if ctx.replica_id == 1:
                time.sleep({sleep})
                ctx.barrier()
            return [x]

        opts = tessel.ReplicateOptions(tessel.ReplicateMetadata(2), timeout=0.2)
        try:
            tessel.replicate(body, [[np.ones(2, np.float32)] * 2], options=opts)
        except tessel.DeadlineExceededError as e:
            print("late:", e.message)

        class SlowTeardown:
            def __del__(self):
                time.sleep({teardown})

        keep = SlowTeardown()
    """)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert "replica 1: still running its computation" in run.stdout
    assert "Fatal" not in run.stderr and "terminate" not in run.stderr
    assert time.monotonic() - start < 20  # not the late replica's 30 s sleep
