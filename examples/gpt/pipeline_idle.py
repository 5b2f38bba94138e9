"""The measured bubble of a pipeline's step from Python (the C++ is examples/train/pipeline_idle.h;
docs/pipeline.md, "The measured bubble"): for each stage, the fraction of the step's wall time
its devices were not running op kernels, and the time its transfers to and from the neighbouring
stages took.

    meter = IdleMeter(devices_per_stage, timeout)   # drains the devices, reads their counters
    y = meter.transfer(0, 1, lambda: relayout(...))  # a transfer, timed for both stages
    idle = meter.finish()                            # drains again, reads again: PipelineIdle
    idle.stages[1].idle_fraction                     # 1 - computing / wall

The counters are each device's busy time (Device.busy_time(): tessel/runtime/busy_time.h). A
stage's computing time is the mean over its devices of this process; idle is 1 - computing /
wall, the wall time from the meter's start to finish(), both taken with every device of the
runtime drained (Runtime.synchronize, up to `timeout` seconds: DeadlineExceededError naming the
device still busy). A transfer's time is the least time any of its devices (of this process) spent
in collectives during it: the device that arrived last waited for nobody, so that is the data's
movement, not the wait for a late stage (which is the bubble's); it counts for both stages. A
stage whose devices are all in other processes is not measured (devices 0, figures 0); its
figures come from the process that holds it with GptPipeline.idle_everywhere, which also
recomputes each stage's transfer time from every process's log (shorter_sides: a transfer counts
the shorter of its two sides, as the C++'s transfer_seconds_across).

transfer() may be called from several threads at once (stage threads); then a device in two
transfers at once counts both in each, and the least side still bounds the transfer.
"""
import collections
import threading
import time

import tessel

StageIdle = collections.namedtuple("StageIdle", [
    "devices", "computing_seconds", "communication_seconds", "transfer_seconds",
    "idle_fraction", "transfer_fraction"])
# log: each transfer as (from, to, seconds this process's devices spent in it; -1: none took part).
PipelineIdle = collections.namedtuple("PipelineIdle",
                                      ["wall_seconds", "transfers", "stages", "log"])


def shorter_sides(logs):
    """Each stage's transfer seconds from logs[s], the transfer log of the process holding stage
    s (the same transfers in the same order on every process): each transfer counts the shorter
    of its two sides' times (a side's time includes its wait for the other process; the side
    that arrived last waited for nobody), for both its stages. Logs of other transfers:
    ValueError."""
    first = logs[0]
    for log in logs:
        if [(f, t) for f, t, _ in log] != [(f, t) for f, t, _ in first]:
            raise ValueError(f"pipeline idle: the stages' transfer logs differ ({len(first)} and "
                             f"{len(log)} transfers, or other stages): they are not of the same "
                             f"schedule")
    out = [0.0] * len(logs)
    for i, (source, to, _) in enumerate(first):
        sides = [logs[s][i][2] for s in (source, to) if logs[s][i][2] >= 0]
        if sides:
            for s in {source, to}:
                out[s] += min(sides)
    return out


def transfer_seconds(before, after):
    """The least positive communication time of the devices between two readings (0 when none
    communicated)."""
    times = [a["communication_seconds"] - b["communication_seconds"]
             for b, a in zip(before, after)]
    return min((t for t in times if t > 0), default=0.0)


class IdleMeter:
    """stages: each stage's tessel.Device objects of this process (empty: not measured)."""

    def __init__(self, stages, timeout):
        self.stages, self.timeout = [list(d) for d in stages], timeout
        self._lock = threading.Lock()
        self._transfer = [0.0] * len(self.stages)
        self._transfers = 0
        self._log = []
        self._drain()
        self._start = [[d.busy_time() for d in devices] for devices in self.stages]
        self._started = time.monotonic()

    def transfer(self, source, to, fn):
        """fn() (a transfer from stage `source` to stage `to` that waits for its collectives: a
        relayout), its time counted for both stages."""
        devices = self.stages[source] + (self.stages[to] if to != source else [])
        before = [d.busy_time() for d in devices]
        out = fn()
        seconds = transfer_seconds(before, [d.busy_time() for d in devices])
        with self._lock:
            for s in {source, to}:
                self._transfer[s] += seconds
            self._transfers += 1
            self._log.append((source, to, seconds if devices else -1.0))
        return out

    def finish(self):
        """Drains the devices and reads them: the window's PipelineIdle."""
        self._drain()
        wall = time.monotonic() - self._started
        stages = []
        for s, devices in enumerate(self.stages):
            if not devices:
                stages.append(StageIdle(0, 0.0, 0.0, 0.0, 0.0, 0.0))
                continue
            after = [d.busy_time() for d in devices]
            computing = sum(a["kernel_seconds"] - b["kernel_seconds"]
                            for b, a in zip(self._start[s], after)) / len(devices)
            communicating = sum(a["communication_seconds"] - b["communication_seconds"]
                                for b, a in zip(self._start[s], after)) / len(devices)
            stages.append(StageIdle(len(devices), computing, communicating, self._transfer[s],
                                    1 - computing / wall, self._transfer[s] / wall))
        return PipelineIdle(wall, self._transfers, stages, list(self._log))

    def _drain(self):
        tessel.Runtime.global_runtime().synchronize(self.timeout)
