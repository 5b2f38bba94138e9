"""The peers' programs for bench/peers/run_peers.py: which peer is installed, the command
lines of one peer's run of one workload, and the readers of their outputs (each turns a run's
stdout into rows {"case", "time_us", "wrong", ...}).

Every command prints JSON or (Open MPI's C baseline) a table on stdout; nothing here runs a
workload itself. Standard library only.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import statistics
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

PEERS = ("tessel", "mpi", "jax", "torch")
WORKLOADS = ("all_reduce", "relayout", "matmul", "dispatch", "gpt")
DEBIAN_PYTHON = "/usr/bin/python3"
TORCH_GPT_THREADS = 2  # PyTorch eager's intra-op threads: the machine's two cores

# Why a peer has no row for a workload (an operation it does not have, not a failure).
NOT_APPLICABLE = {
    ("mpi", "relayout"): "MPI has no sharded tensors: a relayout there is hand-written packing "
                         "+ MPI_Alltoall (tessel bench relayout times that raw collective itself)",
    ("mpi", "matmul"): "MPI moves bytes; it has no tensor ops",
    ("mpi", "dispatch"): "MPI has no tensor ops to dispatch",
    ("mpi", "gpt"): "MPI is not a training framework",
}


# ---- peers: availability and commands ------------------------------------------------------


class Peers:
    """Where each peer's program is, and why a peer is unavailable on this machine."""

    def __init__(self, args):
        self.args = args
        self.tessel_cli = args.build / "tools" / "tessel"
        self.venv_python = args.venv / "bin" / "python"
        self.unavailable: dict[str, str] = {}
        self.versions: dict[str, dict] = {}
        self.mpi_binary = args.out / "mpi_allreduce"

    def probe(self):
        """Finds out which of the asked peers can run (tessel's CLI is checked by the caller)."""
        a = self.args
        if "mpi" in a.peers:
            self._probe_mpi()
        for peer, module in (("jax", "jax"), ("torch", "torch")):
            if peer in a.peers:
                self._probe_venv(peer, module)

    def _probe_mpi(self):
        if not (shutil.which("mpicc") and shutil.which("mpirun")):
            self.unavailable["mpi"] = "mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
            return
        self.args.out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mpicc", "-O2", "-o", str(self.mpi_binary), str(REPO / "bench" / "mpi_allreduce.c")],
                           capture_output=True, text=True)
        if r.returncode:
            self.unavailable["mpi"] = f"mpicc failed: {last_line(r.stderr)}"
            return
        v = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
        self.versions["mpi"] = {"open_mpi": v.splitlines()[0] if v else "?"}

    def _probe_venv(self, peer, module):
        if not self.venv_python.is_file():
            self.unavailable[peer] = (f"no peers' venv at {self.args.venv} "
                                      "(scripts/peers-venv.sh makes it; make bench-peers runs it)")
            return
        r = subprocess.run([str(self.venv_python), "-c", f"import {module}; print({module}.__version__)"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            self.unavailable[peer] = f"import {module} failed in {self.args.venv}: {last_line(r.stderr)}"

    def env(self, peer):
        """The environment of a peer's processes: the venv's peers never see tessel's module."""
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if peer == "tessel":
            env["PYTHONPATH"] = str(self.args.build / "python")
        if peer == "torch":
            env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
            env["MASTER_ADDR"] = "127.0.0.1"
        if peer == "mpi" and os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        return env

    def available(self, peer):
        return peer not in self.unavailable


def last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else "(no output)"


def torchrun(peers, nproc, *argv):
    """The torch peer's ranks as its users start them (torchrun), or, with --torch-launch
    same-session, started by a shell in one session (torch's env:// rendezvous variables set by
    hand): the control for the scheduler effect described in run_peers.py's header warning."""
    script = [str(peers.venv_python), str(HERE / "torch_peer.py"), *argv]
    if peers.args.torch_launch == "torchrun":
        return [str(peers.venv_python), "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={nproc}", *script[1:]]
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = " ".join(f'RANK={r} LOCAL_RANK={r} "$@" &' for r in range(nproc - 1, 0, -1))
    return ["sh", "-c", f'export WORLD_SIZE={nproc} MASTER_PORT={port}; {ranks} '
            'RANK=0 LOCAL_RANK=0 "$@"; status=$?; wait; exit $status', "sh", *script]




# ---- one run of one peer on one workload ---------------------------------------------------
# Each returns a list of commands (run in order, in separate processes) and a function that
# turns their outputs into rows {"case", "time_us", "wrong", and optionally "bytes", "count",
# "work", ...}.


def plan_run(peers: Peers, s, workload: str, peer: str):
    """(commands, reader) of one run; s: run_peers.Settings (sizes and calls)."""
    cli = str(peers.tessel_cli)
    iters = ["--iters", str(s.allreduce_iters), "--warmup", str(s.allreduce_warmup)]
    sizes = ",".join(map(str, s.sizes))
    if workload == "all_reduce":
        if peer == "tessel":
            return [[cli, "bench", "all_reduce", "--devices", "4", "-b", str(s.sizes[0]),
                     "-e", str(s.sizes[-1]), "-f", str(s.sizes[1] // s.sizes[0] if len(s.sizes) > 1 else 2),
                     *iters, "--json"]], rows_tessel_allreduce
        if peer == "mpi":
            return [["mpirun", "--oversubscribe", "-np", "4", str(peers.mpi_binary), "-b", str(s.sizes[0]),
                     "-e", str(s.sizes[-1]), "-f", str(s.sizes[1] // s.sizes[0] if len(s.sizes) > 1 else 2),
                     "-n", str(s.allreduce_iters), "-w", str(s.allreduce_warmup)]], rows_mpi_allreduce
        if peer == "jax":
            return [[str(peers.venv_python), str(HERE / "jax_peer.py"), "all_reduce", "--sizes", sizes,
                     *iters]], rows_peer
        return [torchrun(peers, 4, "all_reduce", "--sizes", sizes, *iters)], rows_peer
    if workload == "relayout":
        n, it = s.relayout_n, ["--iters", str(s.relayout_iters)]
        if peer == "tessel":
            base = [cli, "bench", "relayout", "--shape", f"{n},{n}", "--mesh", "x=4",
                    "--from", "x,unsharded", "-n", str(s.relayout_iters), "--json"]
            return [base + ["--to", "unsharded,x"], base + ["--to", "unsharded,unsharded"]], rows_tessel_relayout
        if peer == "jax":
            return [[str(peers.venv_python), str(HERE / "jax_peer.py"), "relayout", "--side", str(n), *it]], rows_peer
        return [torchrun(peers, 4, "relayout", "--side", str(n), *it)], rows_peer
    if workload == "matmul":
        n, it = s.matmul_n, ["--iters", str(s.matmul_iters)]
        if peer == "tessel":
            return [[cli, "bench", "matmul", "--n", str(n), "--devices", "2",
                     "--rounds", str(s.matmul_iters), "--json"]], rows_tessel_matmul
        if peer == "jax":
            return [[str(peers.venv_python), str(HERE / "jax_peer.py"), "matmul", "--side", str(n), *it]], rows_peer
        return [torchrun(peers, 2, "matmul", "--side", str(n), *it)], rows_peer
    if workload == "dispatch":
        d = ["--ops", str(s.dispatch_ops), "--rounds", str(s.dispatch_rounds)]
        if peer == "tessel":
            return [[DEBIAN_PYTHON, str(HERE / "tessel_peer.py"), "dispatch", *d]], rows_peer
        if peer == "jax":
            return [[str(peers.venv_python), str(HERE / "jax_peer.py"), "dispatch", *d]], rows_peer
        return [torchrun(peers, 4, "dispatch", *d)], rows_peer
    # gpt
    total = s.gpt_warmup + s.gpt_steps
    if peer == "tessel":
        # `tessel train gpt`, not `tessel bench gpt`: its --metrics file has every step's time
        # and loss, the curve the PyTorch peer's is compared with (same init, batches, schedule).
        metrics = peers.args.out / f"gpt_{s.gpt_config}_tessel_metrics.csv"
        metrics.unlink(missing_ok=True)  # a failed run must not leave an older run's file
        return [[cli, "train", "gpt", "--config", s.gpt_config, "--mesh", s.gpt_mesh,
                 "--steps", str(total), "--dropout", "0", "--eval-interval", str(total + 1),
                 "--eval-iters", "1", "--sample", "0", "--metrics", str(metrics), "--json"]], \
            lambda outs: rows_tessel_gpt(outs, metrics, s.gpt_config, s.gpt_warmup)
    if peer == "torch":
        return [[str(peers.venv_python), str(HERE / "torch_gpt.py"), "--config", s.gpt_config,
                 "--steps", str(s.gpt_steps), "--warmup", str(s.gpt_warmup),
                 "--schedule-steps", str(total), "--dropout", "0",
                 "--threads", str(TORCH_GPT_THREADS), "--json"]], rows_torch_gpt
    return [[str(peers.venv_python), str(REPO / "examples" / "gpt" / "reference" / "bench_gpt_jax.py"),
             "--config", s.gpt_config, "--mesh", s.gpt_mesh, "--steps", str(s.gpt_steps),
             "--warmup", str(s.gpt_warmup),
             "--json"]], rows_jax_gpt


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON object in the output")


def rows_tessel_allreduce(outs):
    doc = last_json(outs[0])
    return [{"case": r["bytes"], "bytes": r["bytes"], "count": r["count"], "time_us": r["time_us"],
             "wrong": r["wrong"]} for r in doc["rows"]], {}


def rows_mpi_allreduce(outs):
    rows = []
    for line in outs[0].splitlines():
        if line.startswith("#") or not line.strip():
            continue
        b, count, t, _algbw, _busbw, wrong = line.split()
        rows.append({"case": int(b), "bytes": int(b), "count": int(count), "time_us": float(t),
                     "wrong": int(wrong)})
    return rows, {}


def rows_tessel_relayout(outs):
    rows = []
    for label, out in zip(("S(0)->S(1)", "S(0)->R"), outs):
        doc = last_json(out)
        rows.append({"case": label, "time_us": doc["relayout_us"], "wrong": doc["wrong"],
                     "plan": doc["plan"]})
    return rows, {}


def rows_tessel_matmul(outs):
    doc = last_json(outs[0])
    return [{"case": f"{doc['n']}^3 rows over {doc['devices']}", "time_us": doc["sharded_us"],
             "wrong": 0, "single_device_us": doc["single_us"]}], {}


def rows_tessel_gpt(outs, metrics: Path, config: str, warmup: int):
    """`tessel train gpt --metrics`: the median of the steps after the warm-up, and every loss."""
    doc = last_json(outs[0])
    tokens = round(doc["tokens_per_second"] * doc["median_step_seconds"])  # batch x context
    steps = []
    with open(metrics, newline="") as f:
        for r in csv.DictReader(f):
            if r["kind"] == "train":
                steps.append((int(r["step"]), float(r["loss"]), float(r["lr"]),
                              float(r["step_seconds"])))
    steps.sort()
    times = [t for *_, t in steps[warmup:]]
    return [{"case": config, "time_us": statistics.median(times) * 1e6, "work": tokens, "wrong": 0,
             "mesh": "2x2", "step_s": times, "losses": [l for _, l, _, _ in steps],
             "lrs": [lr for _, _, lr, _ in steps]}], {}


def rows_torch_gpt(outs):
    doc = last_json(outs[0])
    return [{"case": doc["config"], "time_us": doc["median_step_s"] * 1e6,
             "work": doc["tokens_per_step"], "wrong": 0, "threads": doc["threads"],
             "step_s": doc["step_s"], "losses": doc["losses"], "lrs": doc["lrs"],
             "ln_vocab": doc["ln_vocab"], "same_inputs_as": "tessel"}], doc["versions"]


def rows_jax_gpt(outs):
    doc = last_json(outs[0])
    return [{"case": doc["config"], "time_us": doc["median_step_s"] * 1e6,
             "work": doc["tokens_per_step"], "wrong": 0, "mesh": "2x2", "step_s": doc["step_s"],
             "losses": doc["losses"]}], {"jax": doc["jax_version"]}


def rows_peer(outs):
    doc = last_json(outs[0])
    return doc["rows"], doc.get("versions", {})
