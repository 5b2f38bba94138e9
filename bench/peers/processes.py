"""Running the peers' processes for bench/peers/run_peers.py: a deadline that stops a run's
whole process group, the share of the CPU other processes took meanwhile, and the facts about
the machine that a result needs beside it. Standard library only."""

from __future__ import annotations

import os
import platform
import resource
import json
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_with_deadline(cmd, env, timeout_s):
    """(exit status, stdout, stderr) of cmd, or None when it overran timeout_s. The command runs
    in a session of its own so that an overrun stops all of it: SIGTERM to its process group
    (torchrun and mpirun pass it on to their ranks), SIGKILL 10 s later if it is still there."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=REPO, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.communicate(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(worker, args, nprocs: int) -> dict:
    """Runs worker(rank, args, port, out_path) in nprocs processes (torch.multiprocessing.spawn,
    in the peers' venv; port: a free one for the gloo rendezvous) and returns the JSON object
    rank 0 wrote to out_path (torch_fsdp.py, torch_pipeline.py)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        mp.spawn(worker, args=(args, free_port(), out), nprocs=nprocs, join=True)
        return json.loads(Path(out).read_text())


def cpu_sample():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    total = sum(v)
    busy = total - v[3] - v[4]  # less idle and iowait; steal counts as busy (someone else's)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy, total, kids.ru_utime + kids.ru_stime


def other_cpu(a, b):
    """Share of the machine's CPU time taken by other processes (and steal) between samples."""
    hz = os.sysconf("SC_CLK_TCK")
    total = b[1] - a[1]
    if total <= 0:
        return 0.0
    return max(0.0, ((b[0] - a[0]) - (b[2] - a[2]) * hz) / total)


def git_describe() -> str:
    r = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "?"


def sched_autogroup() -> bool:
    """Whether the kernel shares the CPU between sessions rather than threads (see the header)."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def machine_facts() -> dict:
    return {"cpus": os.cpu_count(), "cpu": cpu_model(), "platform": platform.platform(),
            "sched_autogroup": sched_autogroup()}
