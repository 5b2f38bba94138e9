#!/usr/bin/python3
"""Side by side with the peers: the same workloads on tessel, Open MPI, JAX and PyTorch, in one
run on this machine, with the ratio of each peer's time to tessel's.

    make bench-peers                          # makes .venv-peers once, then runs this
    /usr/bin/python3 bench/peers/run_peers.py [--quick] [--repeat R] [--json]
        [--workloads all_reduce,relayout,matmul,dispatch,gpt] [--peers tessel,mpi,jax,torch]
        [--build build] [--venv .venv-peers] [--out build/peers] [--plot FILE]
        [--torch-launch torchrun|same-session]

Workloads (f32; 4 devices or ranks unless said):
  all_reduce  4 KiB .. 64 MiB per rank: time and busbw (nccl-tests' definitions)
  relayout    4096x4096 rows-sharded (S(0)) -> columns-sharded (S(1)), and S(0) -> replicated
  matmul      2048^3, rows of A sharded over 2 devices, B replicated
  dispatch    a tiny elementwise add on a 2x2 mesh, eager, from Python: time per op
  gpt         the GPT training step (examples/gpt) on a 2x2 (batch x model) mesh: tokens/s
Peers, each set up as its users set it up:
  tessel  the CLI's benches (build/tools/tessel bench ... --json) and, for dispatch, the Python
          module under Debian's /usr/bin/python3 (bench/peers/tessel_peer.py)
  mpi     Open MPI's MPI_Allreduce, 4 processes (bench/mpi_allreduce.c, mpirun --oversubscribe)
  jax     one process, 4 host devices (--xla_force_host_platform_device_count=4), jit,
          NamedSharding / shard_map (bench/peers/jax_peer.py, examples/gpt/reference/
          bench_gpt_jax.py), in the peers' venv
  torch   torch.distributed over gloo and DTensor redistribute, 4 processes under torchrun
          (bench/peers/torch_peer.py), in the peers' venv
Every repetition runs every workload on every peer, the peers taking turns in an order that
rotates between repetitions, so a burst of load elsewhere on the machine hits all of them.
Each run reports its own median over its timed calls; the table shows the median of those
over the repetitions, their spread, and the ratio peer time / tessel time (> 1: tessel is
faster). A peer that cannot run a workload (not installed, or no such operation) gets a row
saying why. Results are checked against exact or NumPy references; the exit status is 1 if
any peer computed a wrong result, 2 on bad arguments or without tessel's CLI.

Writes <out>/peers.json (every sample, the versions, the machine's load per run) and a PNG
plot (busbw vs size for the all-reduce, ratio bars for the rest; needs the venv's matplotlib).
--quick: fewer sizes, calls and repetitions and the `tiny` GPT, for a run of a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from peers_table import TESSEL, Workload, document_json, format_table  # noqa: E402

PEERS = ("tessel", "mpi", "jax", "torch")
WORKLOADS = ("all_reduce", "relayout", "matmul", "dispatch", "gpt")
DEBIAN_PYTHON = "/usr/bin/python3"

# Why a peer has no row for a workload (an operation it does not have, not a failure).
NOT_APPLICABLE = {
    ("mpi", "relayout"): "MPI has no sharded tensors: a relayout there is hand-written packing "
                         "+ MPI_Alltoall (tessel bench relayout times that raw collective itself)",
    ("mpi", "matmul"): "MPI moves bytes; it has no tensor ops",
    ("mpi", "dispatch"): "MPI has no tensor ops to dispatch",
    ("mpi", "gpt"): "MPI is not a training framework",
    ("torch", "gpt"): "no PyTorch port of examples/gpt in the repo (JAX has the reference "
                      "model, examples/gpt/reference/gpt_jax.py)",
}


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 4096, 4K, 64M)") from None


def parse_list(allowed):
    def parse(text: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"bad value {','.join(bad) or text!r}: choose from {','.join(allowed)}")
        return items
    return parse


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="run_peers.py", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a run of a few minutes")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 3; quick 2)")
    ap.add_argument("--workloads", type=parse_list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--peers", type=parse_list(PEERS), default=list(PEERS))
    ap.add_argument("-b", "--minbytes", type=parse_size, default=4 << 10)
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=64 << 20)
    ap.add_argument("--gpt-config", choices=("tiny", "baby"), default=None,
                    help="GPT config (default baby; quick tiny)")
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--venv", type=Path, default=REPO / ".venv-peers")
    ap.add_argument("--torch-launch", choices=("torchrun", "same-session"), default="torchrun",
                    help="how torch's ranks start (default torchrun, a session per rank)")
    ap.add_argument("--out", type=Path, default=None, help="folder for peers.json (default <build>/peers)")
    ap.add_argument("--plot", type=Path, default=None, help="PNG path (default <out>/peers.png)")
    ap.add_argument("--json", action="store_true", help="print the JSON document instead of tables")
    args = ap.parse_args(argv)
    if TESSEL not in args.peers:
        ap.error("--peers must include tessel (the ratios are to tessel's time)")
    if args.repeat is None:
        args.repeat = 2 if args.quick else 3
    if not 1 <= args.repeat <= 100:
        ap.error(f"--repeat {args.repeat}: must be 1..100")
    if not 4 <= args.minbytes <= args.maxbytes or args.minbytes % 16:
        ap.error(f"sizes {args.minbytes}..{args.maxbytes}: need 4 <= min <= max, min a multiple of 16")
    args.gpt_config = args.gpt_config or ("tiny" if args.quick else "baby")
    args.out = args.out or args.build / "peers"
    args.plot = args.plot or args.out / "peers.png"
    return args


class Settings:
    """Calls and sizes of each workload: the full run, or --quick."""

    def __init__(self, args):
        q = args.quick
        factor = 4 if q else 2
        sizes, s = [], args.minbytes
        while s <= args.maxbytes:
            sizes.append(s)
            s *= factor
        self.sizes = sizes
        self.allreduce_iters, self.allreduce_warmup = (10, 3) if q else (20, 5)
        self.relayout_n, self.relayout_iters = 4096, (5 if q else 10)
        self.matmul_n, self.matmul_iters = 2048, (3 if q else 5)
        self.dispatch_ops, self.dispatch_rounds = (300, 5) if q else (1000, 7)
        self.gpt_config, self.gpt_steps = args.gpt_config, (3 if q else 2)


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
        a = self.args
        if not self.tessel_cli.is_file():
            print(f"run_peers.py: error: no tessel CLI at {self.tessel_cli} (make build, or pass "
                  "--build)", file=sys.stderr)
            sys.exit(2)
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


def plan_run(peers: Peers, s: Settings, workload: str, peer: str):
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
    if peer == "tessel":
        return [[cli, "bench", "gpt", "--config", s.gpt_config, "--meshes", "2x2", "--steps", str(s.gpt_steps),
                 "--dropout", "0", "--json"]], rows_tessel_gpt
    return [[str(peers.venv_python), str(REPO / "examples" / "gpt" / "reference" / "bench_gpt_jax.py"),
             "--config", s.gpt_config, "--mesh", "2x2", "--steps", str(s.gpt_steps), "--warmup", "1",
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


def rows_tessel_gpt(outs):
    doc = last_json(outs[0])
    m = doc["meshes"][0]
    return [{"case": f"{doc['config']} 2x2", "time_us": m["step_seconds"] * 1e6,
             "work": m["tokens_per_second"] * m["step_seconds"], "wrong": 0, "mfu": m["mfu"]}], {}


def rows_jax_gpt(outs):
    doc = last_json(outs[0])
    return [{"case": f"{doc['config']} 2x2", "time_us": doc["median_step_s"] * 1e6,
             "work": doc["tokens_per_step"], "wrong": 0}], {"jax": doc["jax_version"]}


def rows_peer(outs):
    doc = last_json(outs[0])
    return doc["rows"], doc.get("versions", {})


# ---- the machine's load while a run ran ----------------------------------------------------


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


# ---- the run -------------------------------------------------------------------------------

TITLES = {
    "all_reduce": "all_reduce f32 sum, 4 ranks (out of place; time per call on the slowest rank)",
    "relayout": "relayout of a 4096x4096 f32 tensor over 4 devices",
    "matmul": "2048^3 f32 matmul, rows of A sharded over 2 devices, B replicated",
    "dispatch": "eager dispatch of a tiny elementwise add on a 2x2 mesh, from Python (time per op)",
    "gpt": "GPT training step on a 2x2 (batch x model) mesh (time per step; tokens/s)",
}
RANKS = {"all_reduce": 4, "relayout": 4, "matmul": 2, "dispatch": 4, "gpt": 4}
# Each run of one peer on one workload is stopped after this many seconds.
TIMEOUT_S = {"all_reduce": 600, "relayout": 600, "matmul": 600, "dispatch": 300, "gpt": 1800}


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


def run_once(peers, settings, w: Workload, peer: str, rep: int, log: list) -> int:
    """One peer's run of one workload; adds its samples to w. Returns its wrong count."""
    cmds, parse = plan_run(peers, settings, w.name, peer)
    outs, wrong = [], 0
    s0, t0 = cpu_sample(), time.time()
    load = os.getloadavg()[0]
    error, last_stderr = None, ""
    for cmd in cmds:
        result = run_with_deadline(cmd, peers.env(peer), TIMEOUT_S[w.name])
        if result is None:
            error = f"timed out after {TIMEOUT_S[w.name]} s (stopped)"
            break
        rc, out, err = result
        last_stderr = err
        if rc not in (0, 1):  # 1: a wrong element (tessel bench), or a Python error: parse decides
            error = f"exit status {rc}: {last_line(err or out)}"
            break
        outs.append(out)
    entry = {"workload": w.name, "peer": peer, "repetition": rep, "load_1min": load,
             "wall_s": round(time.time() - t0, 2), "other_cpu": round(other_cpu(s0, cpu_sample()), 3)}
    if error is None:
        try:
            rows, versions = parse(outs)
        except (ValueError, KeyError, IndexError) as e:
            error = f"unreadable output ({e}): {last_line(last_stderr or (outs[-1] if outs else ''))}"
        else:
            peers.versions.setdefault(peer, {}).update(versions)
            for row in rows:
                c = w.case(str(row["case"]), bytes=row.get("bytes"), count=row.get("count"),
                           work=row.get("work"))
                cell = c.cell(peer)
                cell.samples_us.append(float(row["time_us"]))
                extra = {k: v for k, v in row.items()
                         if k not in ("case", "bytes", "count", "work", "time_us")}
                cell.extra.setdefault("runs", []).append(extra)
                wrong += int(row.get("wrong", 0))
    if error is not None:
        entry["error"] = error
        print(f"# {w.name}/{peer} repetition {rep}: {error}", file=sys.stderr)
    log.append(entry)
    return wrong


def main(argv=None):
    args = parse_args(argv)
    settings = Settings(args)
    peers = Peers(args)
    args.out.mkdir(parents=True, exist_ok=True)
    peers.probe()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_start = os.getloadavg()
    print(f"# run_peers: {','.join(args.workloads)} on {','.join(args.peers)}; {args.repeat} "
          f"repetition(s){' (quick)' if args.quick else ''}; {started}; load average "
          f"{load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}", file=sys.stderr)
    for peer, why in peers.unavailable.items():
        print(f"# {peer} unavailable: {why}", file=sys.stderr)

    workloads = {name: Workload(name, TITLES[name], RANKS[name], list(args.peers),
                                throughput_unit="tokens/s" if name == "gpt" else None)
                 for name in args.workloads}
    log, wrong = [], 0
    # Which peer can run what: the rest get their reason once the cases are known.
    runnable = {name: [p for p in args.peers
                       if (p, name) not in NOT_APPLICABLE and peers.available(p)]
                for name in args.workloads}
    for rep in range(args.repeat):
        for name in args.workloads:
            order = runnable[name][rep % len(runnable[name]):] + runnable[name][:rep % len(runnable[name])]
            for peer in order:
                print(f"# repetition {rep + 1}/{args.repeat}: {name} on {peer}", file=sys.stderr)
                wrong += run_once(peers, settings, workloads[name], peer, rep, log)
    for name, w in workloads.items():
        if not w.cases:  # even tessel failed: one placeholder case so the reasons print
            w.case("(no result)")
        for peer in args.peers:
            if (peer, name) in NOT_APPLICABLE:
                w.mark_unavailable(peer, NOT_APPLICABLE[(peer, name)])
            elif not peers.available(peer):
                w.mark_unavailable(peer, peers.unavailable[peer])
        for c in w.cases:
            for peer in args.peers:
                cell = c.cell(peer)
                if not cell.samples_us and cell.unavailable is None:
                    errors = [e["error"] for e in log
                              if e["workload"] == name and e["peer"] == peer and "error" in e]
                    cell.unavailable = f"failed: {errors[-1]}" if errors else "no result"

    peers.versions.setdefault("tessel", {})["git"] = git_describe()
    meta = {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "quick": args.quick, "repetitions": args.repeat, "settings": vars(settings),
            "torch_launch": args.torch_launch,
            "machine": {"cpus": os.cpu_count(), "cpu": cpu_model(), "platform": platform.platform(),
                        "sched_autogroup": sched_autogroup()},
            "load_average_start": load_start, "load_average_end": os.getloadavg(),
            "versions": peers.versions, "unavailable": peers.unavailable, "runs": log,
            "wrong": wrong}
    doc = document_json(list(workloads.values()), meta)
    (args.out / "peers.json").write_text(doc + "\n")
    if args.json:
        print(doc)
    else:
        print(format_header(meta))
        for w in workloads.values():
            print()
            print(format_table(w))
            print(f"# other processes took {median_other_cpu(log, w.name)} of the CPU time during "
                  f"this workload's runs (median)")
    plot(peers, args)
    print(f"# wrote {args.out / 'peers.json'}" + (f" and {args.plot}" if args.plot.is_file() else ""),
          file=sys.stderr)
    return 1 if wrong else 0


def format_header(meta) -> str:
    lines = [f"# run_peers {meta['started']} .. {meta['finished']}; {meta['machine']['cpus']} CPUs, "
             f"{meta['machine']['cpu']}; load average {meta['load_average_start'][0]:.2f} at start, "
             f"{meta['load_average_end'][0]:.2f} at end; {meta['repetitions']} repetition(s)"]
    for peer, v in meta["versions"].items():
        lines.append(f"# {peer}: " + ", ".join(f"{k} {x}" for k, x in v.items()))
    for peer, why in meta["unavailable"].items():
        lines.append(f"# {peer}: unavailable ({why})")
    lines.append(f"# wrong results: {meta['wrong']}")
    busy = [e["other_cpu"] for e in meta["runs"]]
    torchrun = meta.get("torch_launch", "torchrun") == "torchrun" and "torch" in meta["versions"]
    if (torchrun and meta["machine"].get("sched_autogroup") and busy
            and sorted(busy)[len(busy) // 2] > 0.5):
        lines.append("# warning: other processes took most of the CPU, and the kernel shares it "
                     "per session (sched_autogroup): torchrun's ranks, one session each, got more "
                     "of it than one tessel or JAX process; re-measure on a quiet machine "
                     "(or compare with --torch-launch same-session)")
    return "\n".join(lines)


def median_other_cpu(log, workload) -> str:
    xs = sorted(e["other_cpu"] for e in log if e["workload"] == workload)
    return f"{100 * xs[len(xs) // 2]:.0f}%" if xs else "?"


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


def plot(peers: Peers, args):
    """The PNG, drawn by the venv's matplotlib; without it, a note and no plot."""
    if not peers.venv_python.is_file():
        print("# no plot: the peers' venv (matplotlib) is missing", file=sys.stderr)
        return
    r = subprocess.run([str(peers.venv_python), str(HERE / "plot_peers.py"), str(args.out / "peers.json"),
                        str(args.plot)], capture_output=True, text=True, env=peers.env("jax"))
    if r.returncode:
        print(f"# no plot: {last_line(r.stderr)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
