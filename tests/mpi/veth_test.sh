#!/usr/bin/env bash
# veth_test.sh: tessel's MPI tests between two "hosts" joined by a network link (issue: "two
# hosts in separate network namespaces joined by a veth pair, Open MPI over TCP between them:
# the same tests pass").
#
#   tests/mpi/veth_test.sh [--mpiexec PATH] [--kill] [--min-bytes N] <program> [program args...]
#
# What: makes two network namespaces, A and B, joined by a veth pair (10.213.0.1/24 in A,
# 10.213.0.2/24 in B), each with its own host name (a UTS namespace inside the network
# namespace), and runs <program> as 2 MPI processes, rank 0 on "host" A and rank 1 on "host" B,
# with Open MPI over TCP on that link. Then it checks, and prints, that the veth's byte counters
# grew by at least --min-bytes (default 1 MiB) in each direction: the data really crossed the
# link (each namespace has only its loopback and its veth end, and only the tcp and self BTLs
# are enabled).
#
# How: mpirun runs inside A (`ip netns exec A unshare --uts ...`) with a hostfile naming the two
# addresses (slots=1 each). Open MPI starts the daemon (orted) of a remote host through its rsh
# launcher; `--mca plm_rsh_agent` points it at a small generated wrapper that takes
# `<host> <command...>` like ssh and runs the command in that host's namespaces instead, so no
# ssh server is needed. TCP only: `--mca pml ob1 --mca btl tcp,self` (no UCX, libfabric or
# shared memory), `btl_tcp_if_include` and `oob_tcp_if_include` set to the link's subnet.
# docs/multi-host.md explains the flags and how a run on two real machines differs.
#
# Why own host names: tessel's MPI transport treats peers with the same host name, boot id and
# pid namespace as local and watches their pids (include/tessel/mpi.h). With distinct host names
# rank 1 is on another host for tessel as well, as it would be on a second machine: a lost peer
# is caught by the collective's deadline, not by the pid watch.
#
# --kill: <program> is tessel_mpi_kill. Runs the kill scenario of kill_test.sh across the two
# hosts (rank 1, on B, SIGKILLs itself 300 ms into a loop of collectives) with the ring
# all-reduce, MPI's all-reduce, the barrier and send/recv, and checks that the survivor (rank 0, on A)
# failed with DeadlineExceeded or Aborted within its collective's timeout plus 10% (+150 ms),
# naming rank 1 (ring, barrier), and that nothing hung. mpirun runs with --enable-recovery
# there (see the comment at the kill runs below for why). Program arguments are not used.
#
# Exit status: the program's (mpirun's), or 1 when the counters or the kill checks fail; 77 (the
# ctest SKIP_RETURN_CODE) when the machine does not let us make namespaces or a veth pair (not
# root, no CAP_NET_ADMIN / CAP_SYS_ADMIN, no `ip`), with one line on stderr saying why.
# The whole script runs under `timeout` (TESSEL_VETH_TIME_LIMIT seconds, default 180), and a
# trap always deletes the namespaces (and so the veth pair) it made, on success, failure,
# Ctrl-C or timeout. Namespaces left by a run that was SIGKILLed (its pid is gone) are removed
# at the start of the next.
set -euo pipefail

# Bound the whole script: run it again under `timeout`, which TERMs the script (and mpirun: the
# same process group) when the limit is reached; the trap below then cleans up.
if [ -z "${TESSEL_VETH_BOUNDED:-}" ]; then
  export TESSEL_VETH_BOUNDED=1
  exec timeout -k 15 "${TESSEL_VETH_TIME_LIMIT:-180}" "$0" "$@"
fi

me="veth_test"
skip() { echo "$me: SKIPPED: $*" >&2; exit 77; }

mpiexec="${MPIEXEC:-mpirun}"
mode=run
min_bytes=$((1 << 20))
while [ $# -gt 0 ]; do
  case "$1" in
    --mpiexec) mpiexec="$2"; shift 2 ;;
    --kill) mode=kill; shift ;;
    --min-bytes) min_bytes="$2"; shift 2 ;;
    --) shift; break ;;
    -*) echo "$me: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ]; then
  echo "usage: $0 [--mpiexec PATH] [--kill] [--min-bytes N] <program> [args...]" >&2
  exit 2
fi
program="$(readlink -f "$1")"
shift
[ -x "$program" ] || { echo "$me: $program is not an executable" >&2; exit 2; }
command -v "$mpiexec" >/dev/null || { echo "$me: no $mpiexec" >&2; exit 2; }

# ---- capabilities -------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces and veth need CAP_NET_ADMIN)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' command (util-linux)"

prefix="tessel-veth"
# Namespaces of earlier runs that were killed before their trap ran (their pid is gone).
for old in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-[ab]-[0-9]*$" || true); do
  oldpid="${old##*-}"
  if ! kill -0 "$oldpid" 2>/dev/null; then
    for p in $(ip netns pids "$old" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns delete "$old" 2>/dev/null || true
  fi
done

ns_a="$prefix-a-$$"
ns_b="$prefix-b-$$"
if_a="tva$$"  # interface names: at most 15 characters
if_b="tvb$$"
ip_a=10.213.0.1
ip_b=10.213.0.2
subnet=10.213.0.0/24
host_a="veth-a-$$"  # the host names the processes see
host_b="veth-b-$$"
tmp=""
made_a=0
made_b=0
mpi_pid=""
mpi_prefix=()  # a command mpirun runs under (kill mode: a timeout per run)

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$mpi_pid" ]; then kill -TERM "$mpi_pid" 2>/dev/null || true; fi
  local ns p
  # A moment for mpirun to end its job (it removes its session directory), then SIGKILL.
  for _ in $(seq 30); do
    [ -z "$( { [ "$made_a" -eq 1 ] && ip netns pids "$ns_a"; [ "$made_b" -eq 1 ] && ip netns pids "$ns_b"; } 2>/dev/null)" ] && break
    sleep 0.1
  done
  for ns in "$ns_a" "$ns_b"; do
    if { [ "$ns" = "$ns_a" ] && [ "$made_a" -eq 1 ]; } || { [ "$ns" = "$ns_b" ] && [ "$made_b" -eq 1 ]; }; then
      # Anything still running inside (an orted, a rank) would keep the namespace alive.
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
      ip netns exec "$ns" ip link delete "$([ "$ns" = "$ns_a" ] && echo "$if_a" || echo "$if_b")" \
        2>/dev/null || true
      ip netns delete "$ns" 2>/dev/null || echo "$me: could not delete namespace $ns" >&2
    fi
  done
  if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
  # Open MPI's session directories, named after the hosts (left behind when a run is killed).
  rm -rf "/tmp/ompi.$host_a".* "/tmp/ompi.$host_b".*
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "$me: interrupted (time limit ${TESSEL_VETH_TIME_LIMIT:-180} s?)" >&2; exit 124' INT TERM HUP

# ---- the two hosts ------------------------------------------------------------------------
err=$(ip netns add "$ns_a" 2>&1) || skip "cannot create a network namespace: $err"
made_a=1
err=$(ip netns add "$ns_b" 2>&1) || skip "cannot create a network namespace: $err"
made_b=1
err=$(ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b" 2>&1) ||
  skip "cannot create a veth pair: $err"
err=$(ip netns exec "$ns_a" unshare --uts true 2>&1) || skip "cannot create a UTS namespace: $err"
ip -n "$ns_a" addr add "$ip_a/24" dev "$if_a"
ip -n "$ns_b" addr add "$ip_b/24" dev "$if_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$if_a" up
ip -n "$ns_b" link set "$if_b" up
for _ in $(seq 50); do  # the link comes up asynchronously
  [ "$(ip netns exec "$ns_a" cat "/sys/class/net/$if_a/operstate")" = up ] &&
    [ "$(ip netns exec "$ns_b" cat "/sys/class/net/$if_b/operstate")" = up ] && break
  sleep 0.1
done

tmp="$(mktemp -d /tmp/tessel-veth.XXXXXX)"
# The rsh agent: called by mpirun (in A) as `<agent> <host> <command...>` to start orted on
# <host>. Like ssh, it joins the command words and hands them to a shell, here in the host's
# network namespace with the host's name (ssh would also give a fresh environment; this one
# inherits mpirun's).
cat >"$tmp/netns-rsh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host="\$1"; shift
case "\$host" in
  $ip_a) ns=$ns_a; name=$host_a ;;
  $ip_b) ns=$ns_b; name=$host_b ;;
  *) echo "netns-rsh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$name" "\$*"
EOF
chmod +x "$tmp/netns-rsh"
printf '%s slots=1\n%s slots=1\n' "$ip_a" "$ip_b" >"$tmp/hosts"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# --bind-to none: each "host" sees all of this machine's cores, and its daemon would bind its
# rank to core 0: both ranks on one core, each spinning while it waits for the other (as a rank
# alone on its host, tessel spins up to 20 ms before yielding): MpiAllReduceConformance.
# EveryDTypeOpAndCount/ring took 47 s instead of 0.9 s.
mpi_flags=(-np 2 --hostfile "$tmp/hosts" --map-by node --bind-to none
           --mca plm rsh --mca plm_rsh_agent "$tmp/netns-rsh"
           --mca pml ob1 --mca btl tcp,self
           --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet"
           -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM)
# More mpirun flags from the environment (word-split), e.g. TESSEL_VETH_MPI_FLAGS=--report-bindings.
read -r -a extra_flags <<<"${TESSEL_VETH_MPI_FLAGS:-}"
mpi_flags+=("${extra_flags[@]}")
for v in LD_LIBRARY_PATH OPENBLAS_NUM_THREADS TESSEL_NO_AVX2; do
  if [ -n "${!v:-}" ]; then mpi_flags+=(-x "$v"); fi
done

counter() { ip netns exec "$ns_a" cat "/sys/class/net/$if_a/statistics/$1"; }

# Runs mpirun in A with the flags above plus "$@"; its output goes to $tmp/out (and, in run
# mode, to stdout as it comes). Sets mpi_rc. mpirun runs in the background so that a TERM from
# `timeout` reaches the trap at once.
run_mpi() {
  mpi_rc=0
  : >"$tmp/out"
  ip netns exec "$ns_a" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host_a" \
    "${mpi_prefix[@]}" "$mpiexec" "${mpi_flags[@]}" "$@" >"$tmp/out" 2>&1 &
  mpi_pid=$!
  if [ "$mode" = run ]; then tail -n +1 -f --pid="$mpi_pid" "$tmp/out" & fi
  wait "$mpi_pid" || mpi_rc=$?
  mpi_pid=""
  wait || true  # the tail
}

echo "$me: host A = $ns_a ($host_a, $if_a $ip_a, runs mpirun and rank 0)," \
     "host B = $ns_b ($host_b, $if_b $ip_b, rank 1)"
echo "$me: $mpiexec ${mpi_flags[*]} $program $*"
rx0=$(counter rx_bytes); tx0=$(counter tx_bytes)
status=0
if [ "$mode" = run ]; then
  start=$SECONDS
  run_mpi "$program" "$@"
  status=$mpi_rc
  echo "$me: mpirun exited $mpi_rc after $((SECONDS - start)) s"
else
  # The kill scenario of kill_test.sh across hosts: rank 1 (on B) SIGKILLs itself mid-loop;
  # rank 0 (on A) is the one survivor. Across hosts tessel has no pid to watch, so the survivor
  # goes by its collective's deadline. Two things in Open MPI (4.1) would stop it reporting:
  # - by default mpirun tears the job down as soon as rank 1 dies: SIGTERM (ignored by
  #   tessel_mpi_kill), then SIGKILL odls_base_sigkill_timeout seconds later;
  # - the TCP BTL notices the closed connection while the survivor polls, and prints "An MPI
  #   communication peer process has unexpectedly disconnected" from inside MPI_Test. That
  #   help message goes to mpirun (PMIx log) and the call waits for it; while mpirun is tearing
  #   the job down it does not answer, so the survivor sits in MPI_Test until it is SIGKILLed,
  #   with no chance to see its deadline (seen with odls_base_sigkill_timeout 5 and 8; with
  #   the default 1 it is killed before its deadline anyway).
  # So these runs use --enable-recovery: mpirun leaves the survivor running when rank 1 dies,
  # the survivor reports by its deadline and leaves with _Exit (--no-watch: it must not call
  # MPI_Finalize, which would wait for the dead peer; see MpiEnvironment). With recovery mpirun
  # exits 0 (it does not count the lost rank against the job), so mpirun's status is printed,
  # not checked: what is checked is the survivor's line, as in kill_test.sh: DeadlineExceeded
  # or Aborted naming rank 1 within the call's timeout plus 10% plus 150 ms, and every run
  # ending well within its own 40 s limit. With MPI's own all-reduce (--algorithm mpi) nothing
  # in MPI says which peer is gone: at the deadline the survivor probes every peer (they answer
  # from any tessel wait) and names those that stay silent for 200 ms.
  # A third way Open MPI stops the survivor: after the TCP reset, the BTL's failed send closes
  # the endpoint and re-locks the endpoint's mutex it already holds, inside opal_progress (a
  # self-deadlock, seen about once in 10 runs of the send check; gdb: mca_btl_tcp_frag_send ->
  # endpoint_close -> ob1 send_fin -> endpoint_send -> pthread_mutex_lock). No MPI call returns
  # again, so tessel's watchdog ends the process stuck_exit_after (5 s) past the deadline,
  # printing "tessel: rank 0 (...) is stuck inside the MPI library N s after the deadline of
  # ..., still waiting for rank 1 (...)". That line is accepted in place of the survivor's,
  # within the deadline plus 5.5 s, and must name rank 1 too, except in the mpi check: inside
  # MPI's own all-reduce nothing says which rank is missing.
  mpi_prefix=(timeout -k 5 40)
  check() {  # name, timeout seconds, names rank 1 (1/0), program arguments...
    local name="$1" timeout_s="$2" names="$3"
    shift 3
    local start end elapsed ok=1 line bound
    local attempt
    for attempt in 1 2 3; do
      start=$(date +%s.%N)
      run_mpi --enable-recovery "$program" "$@"
      end=$(date +%s.%N)
      # mpirun itself can crash (SIGSEGV in pmix_server_log_fn, forwarding the TCP BTL's
      # "peer disconnected" message; seen once in CI-like runs), which ends the job before the
      # survivor reports: that is the launcher's failure, not tessel's, so the run is repeated
      # (at most twice), and said so. Any other crash counts.
      if [ "$mpi_rc" -gt 128 ] && [ "$mpi_rc" -ne 137 ] && grep -q 'pmix_server_log_fn' "$tmp/out" &&
         ! grep -q '^survivor rank 0\|^tessel: rank 0' "$tmp/out"; then
        echo "[$name] mpirun crashed (status $mpi_rc, in pmix_server_log_fn) before rank 0 reported; run $attempt of 3"
        continue
      fi
      # mpirun can also end the whole job before rank 0's deadline, leaving nothing from rank 0
      # (PMIx's event notification failing with BAD-PARAM on both hosts as rank 1 dies; seen once
      # in a clean-clone run: mpirun status 0 after 2.6 s of a 3 s deadline). Rank 0 could not
      # have reported yet, so that run is the launcher's too, repeated and said so.
      if ! grep -q '^survivor rank 0\|^tessel: rank 0\|^rank 0: no error' "$tmp/out" &&
         grep -q 'PMIX ERROR' "$tmp/out" &&
         awk -v a="$start" -v b="$end" -v t="$timeout_s" 'BEGIN{exit !(b - a < t)}'; then
        echo "[$name] mpirun ended the job (status $mpi_rc) before rank 0's deadline with nothing from rank 0 (PMIx errors); run $attempt of 3"
        continue
      fi
      break
    done
    elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')
    bound=$(awk -v t="$timeout_s" 'BEGIN{print t*1.1 + 0.15}')
    line=$(grep '^survivor rank 0' "$tmp/out" || true)
    stuck=$(grep '^tessel: rank 0 (.*) is stuck inside the MPI library' "$tmp/out" || true)
    if [ "$mpi_rc" -eq 124 ] || [ "${elapsed%.*}" -ge 40 ]; then
      echo "[$name] mpirun timed out after $elapsed s"; ok=0
    fi
    if grep -q '^rank 0: no error' "$tmp/out"; then echo "[$name] the survivor saw no error"; ok=0; fi
    if [ -z "$line" ] && [ -n "$stuck" ]; then
      line="$stuck"
      if ! [[ "$stuck" =~ is\ stuck\ inside\ the\ MPI\ library\ ([0-9.]+)\ s\ after ]] ||
         ! awk -v a="${BASH_REMATCH[1]}" 'BEGIN{exit !(a <= 5.5)}'; then
        echo "[$name] the watchdog fired late or unreadably"; ok=0
      fi
      if [ "$name" != mpi ] && [[ "$stuck" != *"still waiting for rank 1 ("* ]]; then
        echo "[$name] does not name rank 1"; ok=0
      fi
    elif [ -z "$line" ]; then
      echo "[$name] rank 0 reported no error"; ok=0
    elif ! [[ "$line" =~ :\ (Aborted|DeadlineExceeded)\ after\ ([0-9.]+)\ s: ]]; then
      echo "[$name] wrong error: $line"; ok=0
    else
      if ! awk -v a="${BASH_REMATCH[2]}" -v b="$bound" 'BEGIN{exit !(a <= b)}'; then
        echo "[$name] took ${BASH_REMATCH[2]} s > $bound s"; ok=0
      fi
      if [ "$names" -eq 1 ] && ! [[ "$line" == *"rank 1 ("* || "$line" == *"ranks [1 ("* ]]; then
        echo "[$name] does not name rank 1"; ok=0
      fi
    fi
    printf '[%s] mpirun rc %d, %.1f s\n[%s]   %s\n' "$name" "$mpi_rc" "$elapsed" "$name" "$line"
    if [ "$ok" -ne 1 ]; then
      status=1
      echo "[$name] FAILED; full output:"
      sed "s/^/[$name] | /" "$tmp/out"
    fi
  }
  check ring 3 1 --algorithm ring --timeout-ms 3000 --no-watch
  check mpi 3 1 --algorithm mpi --timeout-ms 3000 --no-watch
  check barrier 1.5 1 --algorithm barrier --timeout-ms 1500 --no-watch
  check send 3 1 --algorithm send --timeout-ms 3000 --no-watch
fi
rx=$(( $(counter rx_bytes) - rx0 )); tx=$(( $(counter tx_bytes) - tx0 ))
echo "$me: $if_a ($ip_a, host A) over the run: rx $rx bytes, tx $tx bytes (at least $min_bytes each expected)"
ip netns exec "$ns_a" ip -s link show "$if_a" | sed "s/^/$me:   /"
if [ "$rx" -lt "$min_bytes" ] || [ "$tx" -lt "$min_bytes" ]; then
  echo "$me: FAILED: less than $min_bytes bytes crossed the veth in some direction"
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
