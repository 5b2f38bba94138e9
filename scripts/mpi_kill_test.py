#!/usr/bin/env python3
"""Kills one rank of an MPI program at a random moment and checks how the others end.

    scripts/mpi_kill_test.py --program build/bench/mpi/tessel_mpi_allreduce [--np 2,3] [--runs 10]
        [--mpiexec mpirun] [--mpiexec-flags "--oversubscribe"] [--deadline 10] [--seed S]
        [--ready REGEX] [--max-delay S] [--show-output] [-- program arguments]

Each run starts `mpiexec -np N --tag-output <program>` (Open MPI: every output line starts with
"[job,rank]<stderr>:", so lines are told apart by rank). Once all N ranks are running (found in
/proc by a tag in their environment) and the output shows --ready (a regex; default:
tessel_mpi_allreduce's header, which rank 0 prints once the communicators exist, so that the kill
never lands inside MPI_Init, where only mpirun can end the job), the driver waits a random time
in [0, --max-delay] seconds, sends SIGKILL to a random rank and watches the others' processes
until they are gone. A run is
  - "pass" when every survivor printed an error naming the lost rank ("rank K (" or
    "ranks [... K (") and ended within --deadline seconds of the kill, and mpiexec exited
    non-zero;
  - "abort" when any output shows std::terminate ("terminate called") or a death by SIGABRT
    (mpirun's "exited on signal 6");
  - "hang" when mpiexec had not exited --deadline + 10 s after the kill (the driver then kills
    the job and its ranks);
  - "fail" for anything else (a survivor without such an error, one that ended late, mpiexec
    exiting 0, a shared-memory segment of the run's processes left in /dev/shm); "finished early" when the program ended before the kill (counted neither way);
    "no start" when the ranks did not come up within 60 s.
The survivors' own exit statuses cannot be read from outside mpiexec; the programs this checks
exit 1 right after printing the error (a wrapper shell that reported them changed how mpirun
tore the job down, so there is none).
Prints one line per run and a summary (the count of each verdict; time from the kill to the last
survivor's end and to mpiexec's exit: median and max); exit status 0 when every run is "pass" or
"finished early" and at least one is "pass", 1 otherwise, 2 on bad arguments. The ctest
mpi.kill_allreduce runs a few of these.
"""

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# mpiexec --tag-output: "[<job>,<rank>]<stdout>:<line>" (Open MPI).
TAGGED = re.compile(r"^\[[^\]]*,(\d+)\]<std(?:out|err)>:(.*)$")


def find_ranks(program, tag):
    """rank -> pid of the program's processes started by this run (found by their environment)."""
    name = os.path.basename(program)[:15]  # /proc/<pid>/comm keeps 15 characters
    ranks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() != name:
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue  # gone, or not ours to read
        if env.get(b"TESSEL_KILL_TEST_TAG") == tag.encode() and b"OMPI_COMM_WORLD_RANK" in env:
            ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(entry)
    return ranks


def running(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_job(job, program, tag):
    """Ends a stuck run: mpiexec's session, then any rank of it still alive (mpiexec may have
    put them in process groups of their own)."""
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    for pid in find_ranks(program, tag).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.wait()


def lines_by_rank(text):
    """rank -> the lines it printed (tags removed), and every line without its tag."""
    ranks, plain = {}, []
    for line in text.splitlines():
        m = TAGGED.match(line)
        if m:
            ranks.setdefault(int(m.group(1)), []).append(m.group(2))
            plain.append(m.group(2))
        else:
            plain.append(line)
    return ranks, "\n".join(plain)


def names_rank(text, rank):
    """True when an error text names `rank` as tessel does: "rank 1 (host:pid)" or "ranks [1 (...)"."""
    return re.search(rf"\brank {rank} \(", text) is not None or \
        re.search(rf"\branks \[[^\]]*\b{rank} \(", text) is not None


def read_all(out):
    out.seek(0)
    return out.read()


def one_run(args, np_, rng, index):
    """Runs the program once, kills a rank; returns a dict describing what happened."""
    tag = f"{os.getpid()}-{index}"
    env = dict(os.environ, TESSEL_KILL_TEST_TAG=tag)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = [args.mpiexec, "-np", str(np_), *args.mpiexec_flags.split(), "--tag-output",
               "-x", "TESSEL_KILL_TEST_TAG", args.program, *args.program_args]
    result = {"np": np_, "victim": None, "verdict": "pass", "problems": [], "exit_s": None}
    problems = result["problems"]
    with tempfile.TemporaryFile("w+") as out:
        job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
        started = time.monotonic()
        ranks = {}
        ready = re.compile(args.ready, re.M)
        up = False
        while job.poll() is None and time.monotonic() - started < 60:
            if len(ranks) < np_:
                ranks = find_ranks(args.program, tag)
            up = len(ranks) == np_ and ready.search(lines_by_rank(read_all(out))[1]) is not None
            if up:
                break
            time.sleep(0.02)
        if not up:
            kill_job(job, args.program, tag)
            result.update(verdict="no start", output=read_all(out))
            problems.append(f"{len(ranks)} of {np_} ranks started; --ready seen: {up}")
            return result
        delay = rng.uniform(0, args.max_delay)
        time.sleep(delay)
        victim = rng.randrange(np_)
        result.update(victim=victim, delay=delay)
        survivors = {r: pid for r, pid in ranks.items() if r != victim}
        killed_at = time.monotonic()
        try:
            os.kill(ranks[victim], signal.SIGKILL)
        except ProcessLookupError:
            pass  # it had ended already: the run finished early (seen below)
        ended = {}  # survivor rank -> seconds from the kill to its end
        limit = args.deadline + 10
        while time.monotonic() - killed_at < limit:
            for r, pid in survivors.items():
                if r not in ended and not running(pid):
                    ended[r] = time.monotonic() - killed_at
            if job.poll() is not None and len(ended) == len(survivors):
                break
            time.sleep(0.005)
        rc = job.poll()
        if rc is None:
            kill_job(job, args.program, tag)
        else:
            result["mpiexec_s"] = time.monotonic() - killed_at
        text = read_all(out)
    result.update(output=text, rc=rc)
    printed, plain = lines_by_rank(text)
    if rc is None:
        result["verdict"] = "hang"
        problems.append(f"mpiexec still running {limit:.0f} s after the kill")
    if "terminate called" in plain or re.search(r"signal 6\b|\(Aborted\)", plain):
        result["verdict"] = "abort"
        problems.append("std::terminate or SIGABRT")
    if rc == 0 and not any("error" in line.lower() for lines in printed.values() for line in lines):
        result["verdict"] = "finished early"
        problems.append("mpiexec exited 0 without an error: the program ended before the kill")
        return result
    if rc == 0 and "--enable-recovery" not in args.mpiexec_flags:
        # (With --enable-recovery, Open MPI's mpirun exits 0 though a rank was lost.)
        problems.append("mpiexec exited 0")
    for r in sorted(survivors):
        errors = [line for line in printed.get(r, []) if "error" in line.lower()]
        if not any(names_rank(line, victim) for line in errors):
            problems.append(f"rank {r}: no error naming rank {victim}: {errors}")
        if r not in ended or ended[r] > args.deadline:
            problems.append(f"rank {r}: still running {ended.get(r, limit):.2f} s after the kill")
    # Shared-memory segments (src/comm/mpi/host_shm.h) of this run's processes left in /dev/shm.
    pids = {str(pid) for pid in ranks.values()}
    left = [n for n in (os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else [])
            if n.startswith("tessel-shm.") and n.split(".")[1] in pids]
    if left:
        problems.append(f"shared-memory segments left in /dev/shm: {left}")
    result["exit_s"] = max(ended.values()) if len(ended) == len(survivors) else None
    if problems and result["verdict"] == "pass":
        result["verdict"] = "fail"
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--program", required=True)
    parser.add_argument("--np", default="2,3", help="process counts, comma-separated")
    parser.add_argument("--runs", type=int, default=10, help="runs per process count")
    parser.add_argument("--mpiexec", default="mpirun")
    parser.add_argument("--mpiexec-flags", default="--oversubscribe")
    parser.add_argument("--deadline", type=float, default=10.0,
                        help="seconds from the kill to the last survivor's end")
    parser.add_argument("--max-delay", type=float, default=2.0,
                        help="the kill comes a random time in [0, this] after the program is up")
    parser.add_argument("--ready", default=r"^# tessel all_reduce over MPI",
                        help="regex the output must show before the kill (the program is up)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--show-output", action="store_true", help="print every run's output")
    parser.add_argument("program_args", nargs="*")
    args = parser.parse_args()
    if args.runs < 1 or args.deadline <= 0 or args.max_delay < 0:
        parser.error("--runs must be >= 1, --deadline > 0, --max-delay >= 0")
    counts = [int(n) for n in args.np.split(",")]
    if any(n < 2 for n in counts):
        parser.error("--np: every process count must be >= 2 (one rank is killed)")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"# mpi_kill_test: {args.mpiexec} {args.mpiexec_flags} {args.program} "
          f"{' '.join(args.program_args)}; seed {seed}")
    results = []
    for np_ in counts:
        for i in range(args.runs):
            r = one_run(args, np_, rng, len(results))
            results.append(r)
            exit_s = f"{r['exit_s']:.2f} s" if r["exit_s"] is not None else "-"
            mpiexec_s = f"{r['mpiexec_s']:.2f} s" if "mpiexec_s" in r else "-"
            print(f"np {np_} run {i + 1}: killed rank {r['victim']} after {r.get('delay', 0):.2f} s; "
                  f"last survivor ended {exit_s}, mpiexec (rc {r.get('rc')}) {mpiexec_s} after the "
                  f"kill: {r['verdict']}", flush=True)
            for p in r["problems"]:
                print(f"    {p}")
            if args.show_output or r["verdict"] not in ("pass", "finished early"):
                print("    output:\n" + "\n".join("    | " + line for line in r["output"].splitlines()))
    count = {v: sum(r["verdict"] == v for r in results) for v in
             ("pass", "fail", "abort", "hang", "no start", "finished early")}
    times = [r["exit_s"] for r in results if r["exit_s"] is not None]
    job_times = [r["mpiexec_s"] for r in results if "mpiexec_s" in r]
    summary = ", ".join(f"{v} {n}" for v, n in count.items())
    timing = ""
    if times:
        timing += (f"; kill -> last survivor's end: median {statistics.median(times):.2f} s, "
                   f"max {max(times):.2f} s")
    if job_times:
        timing += (f"; kill -> mpiexec exit: median {statistics.median(job_times):.2f} s, "
                   f"max {max(job_times):.2f} s")
    print(f"# {len(results)} runs: {summary}{timing}")
    return 0 if count["pass"] > 0 and count["pass"] + count["finished early"] == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
