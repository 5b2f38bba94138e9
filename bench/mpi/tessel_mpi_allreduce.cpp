// tessel_mpi_allreduce: tessel's all-reduce across MPI processes, timed exactly like the raw
// MPI_Allreduce baseline bench/mpi_allreduce.c (bench/compare_mpi_2proc.sh runs both).
//
//   mpirun -np 2 tessel_mpi_allreduce -b 1M -e 64M -f 2 -n 20 -w 5 [--algorithm auto,ring,...]
//                                     [--devices-per-process L] [--interleave-mpi]
//
// One communicator from make_mpi_communicator (1 device per process), or with
// --devices-per-process L > 1 the L communicators of make_hierarchical_communicators (one thread
// each; N = processes * L ranks), f32 sum, out of place, over the sizes -b..-e (times -f), for
// each algorithm listed (default auto). Before every call all N ranks meet at the
// communicator's barrier; each rank times its own call with MPI_Wtime; one call's time is the
// slowest rank's (a max all-reduce over the ranks); the reported time is the median over the -n
// timed calls (after -w untimed ones). algbw = bytes / time, busbw = algbw * 2(N-1)/N. After
// timing, one more call on fresh inputs (rank r's element j is 1 + (j + 3r) mod 8, as in
// mpi_allreduce.c) is checked against the exact sum; #wrong counts elements that differ, summed
// over ranks.
// --interleave-mpi (one device per process only): every timed tessel call is preceded by a
// timed raw MPI_Allreduce (on a duplicate of MPI_COMM_WORLD, same buffers, same timing), so the
// baseline sees the same machine at the same moment; its rows are named mpi@<algorithm>.
//
// Output (rank 0): '#' comment lines, then one row per algorithm and size:
//   algorithm bytes count time_us algbw_gbps busbw_gbps wrong
// Exit status 0 when every result is right, 1 if any is wrong or a collective fails (a lost
// process, a deadline), 2 on bad arguments. Every wait is tessel's (deadline 60 s, lost local
// peers noticed in about 100 ms: tessel/comm/mpi.h), except the raw MPI calls of
// --interleave-mpi, which MPI itself may block in when a process dies. A failure is printed by
// every rank that sees it, as "tessel_mpi_allreduce: rank <r>: error: <what>", and the process
// ends 300 ms later (so that mpirun, which ends the job at the first non-zero exit, lets the
// other survivors report too) with std::_Exit(1), without MPI_Finalize, which would wait for a
// lost process (scripts/mpi_kill_test.py kills a rank at a random moment and checks this).
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"

namespace {

using namespace tessel;

constexpr const char* kProgram = "tessel_mpi_allreduce";
constexpr int64_t kMaxBytes = int64_t{1} << 40;

// The parsed command line.
struct Config {
  int64_t min_bytes = 4 << 10, max_bytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5, local = 1;
  bool interleave = false;
  std::vector<Algorithm> algorithms = {Algorithm::kAuto};
};

// A bad command line: the message names the flag and its value.
struct UsageError {
  std::string message;
};

// A byte count with an optional unit K, M or G (powers of 1024) in [4, kMaxBytes] (one f32 at
// least), or nothing.
std::optional<int64_t> parse_size(const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || v < 0) return std::nullopt;
  int shift = 0;
  switch (*end) {
    case '\0':
      break;
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
    default:
      return std::nullopt;
  }
  if (shift > 0 && end[1] != '\0') return std::nullopt;
  if (v > (kMaxBytes >> shift)) return std::nullopt;
  const int64_t bytes = static_cast<int64_t>(v) << shift;
  if (bytes < 4) return std::nullopt;
  return bytes;
}

// A whole decimal integer in [low, high], or nothing.
std::optional<int64_t> parse_integer(const std::string& text, int64_t low, int64_t high) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < low || v > high) return std::nullopt;
  return v;
}

Config parse_args(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--interleave-mpi") {
      c.interleave = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError{flag + " needs a value"};
    const std::string value = argv[++i];
    const auto bad = [&](const std::string& expected) {
      return UsageError{flag + " expects " + expected + ", got '" + value + "'"};
    };
    if (flag == "-b" || flag == "-e") {
      const std::optional<int64_t> bytes = parse_size(value);
      if (!bytes) throw bad("a size in [4, 1024G] (e.g. 4096, 4K, 16M)");
      (flag == "-b" ? c.min_bytes : c.max_bytes) = *bytes;
    } else if (flag == "-f") {
      const auto v = parse_integer(value, 2, 1 << 20);
      if (!v) throw bad("an integer in [2, 1048576]");
      c.factor = *v;
    } else if (flag == "-n" || flag == "-w" || flag == "--devices-per-process") {
      const int64_t low = flag == "-w" ? 0 : 1;
      const int64_t high = flag == "--devices-per-process" ? 64 : 1000000;
      const auto v = parse_integer(value, low, high);
      if (!v) {
        throw bad("an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
      }
      (flag == "-n" ? c.iters : flag == "-w" ? c.warmup : c.local) = static_cast<int>(*v);
    } else if (flag == "--algorithm") {
      c.algorithms.clear();
      size_t start = 0;
      while (start <= value.size()) {
        const size_t comma = value.find(',', start);
        try {
          c.algorithms.push_back(algorithm_from_name(value.substr(start, comma - start)));
        } catch (const Error& e) {
          throw UsageError{flag + ": " + e.what()};
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else {
      throw UsageError{"unknown argument '" + flag + "'"};
    }
  }
  if (c.min_bytes > c.max_bytes) {
    throw UsageError{"-b " + std::to_string(c.min_bytes) + " is larger than -e " +
                     std::to_string(c.max_bytes)};
  }
  if (c.interleave && c.local != 1) throw UsageError{"--interleave-mpi needs 1 device per process"};
  return c;
}

float input_value(int rank, int64_t j) { return static_cast<float>(1 + (j + 3 * rank) % 8); }

// What one size of one algorithm measured, reduced over every rank: per call the slowest rank's
// tessel time and (--interleave-mpi) raw MPI time, and the wrong elements of all ranks.
struct Measured {
  std::vector<double> slowest, raw_slowest;
  int64_t wrong = 0;
};

// One local device's share of one size: runs the calls, checks the last one, and reduces the
// timings and the wrong count over all ranks (every rank gets the totals).
Measured run_device(const Config& c, Communicator& comm, MPI_Comm world,
                    const CollectiveOptions& options, int64_t count) {
  const int r = comm.rank(), ranks = comm.size();
  const int calls = c.warmup + c.iters;
  // Entries [0, calls): tessel's times; [calls, 2 calls): raw MPI's (--interleave-mpi).
  Tensor times = Tensor::zeros(Shape{2 * calls}, DType::kF64);
  double* t = times.data<double>();
  Tensor send = Tensor::empty(Shape{count}, DType::kF32);
  Tensor recv = Tensor::zeros(Shape{count}, DType::kF32);
  auto* s = static_cast<float*>(send.data());
  for (int64_t j = 0; j < count; ++j) s[j] = input_value(r, j);
  for (int i = 0; i < calls; ++i) {
    if (c.interleave) {
      MPI_Barrier(world);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, world);
      t[calls + i] = MPI_Wtime() - t0;
    }
    comm.barrier(options);
    const double t0 = MPI_Wtime();
    comm.all_reduce(send, recv, ReduceOp::kSum, options);
    t[i] = MPI_Wtime() - t0;
  }
  // The checked call: fresh inputs, poisoned output.
  for (int64_t j = 0; j < count; ++j) s[j] = input_value(r, j);
  std::memset(recv.data(), 0xA5, static_cast<size_t>(count) * sizeof(float));
  comm.all_reduce(send, recv, ReduceOp::kSum, options);
  const auto* out = static_cast<const float*>(recv.data());
  Tensor wrong = Tensor::zeros(Shape{1}, DType::kI64);
  for (int64_t j = 0; j < count; ++j) {
    float want = 0;
    for (int k = 0; k < ranks; ++k) want += input_value(k, j);
    if (out[j] != want) ++wrong.data<int64_t>()[0];
  }
  comm.all_reduce(times, times, ReduceOp::kMax, options);
  comm.all_reduce(wrong, wrong, ReduceOp::kSum, options);
  return Measured{std::vector<double>(t, t + calls), std::vector<double>(t + calls, t + 2 * calls),
                  wrong.data<int64_t>()[0]};
}

// Runs run_device on every local device (device 0 on this thread, the others on their own
// threads) and returns device 0's result. A device's exception is rethrown here after every
// thread has ended: the failure aborts the group, so the other devices' waits end too.
Measured run_devices(const Config& c, std::vector<std::unique_ptr<Communicator>>& comms,
                     MPI_Comm world, const CollectiveOptions& options, int64_t count) {
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<Measured> results(comms.size());
  const auto device = [&](size_t d) {
    try {
      results[d] = run_device(c, *comms[d], world, options, count);
    } catch (...) {
      errors[d] = std::current_exception();
      try {  // a failing collective has aborted the group already; anything else has not
        comms[d]->abort(std::string(kProgram) + ": local device " + std::to_string(d) + " failed");
      } catch (...) {
        // The group is gone either way; this device's own error is the one reported.
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t d = 1; d < comms.size(); ++d) threads.emplace_back(device, d);
  device(0);
  for (auto& thread : threads) thread.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results[0];
}

void print_row(const std::string& name, int64_t bytes, int ranks,
               const std::vector<double>& slowest, int warmup, long long wrong) {
  const double t = median(std::vector<double>(slowest.begin() + warmup, slowest.end()));
  const double algbw = static_cast<double>(bytes) / t / 1e9;
  std::printf("  %-16s  %10lld  %12lld  %10.2f  %10.3f  %10.3f  %6lld\n", name.c_str(),
              static_cast<long long>(bytes),
              static_cast<long long>(bytes / static_cast<int64_t>(sizeof(float))), t * 1e6, algbw,
              algbw * 2.0 * (ranks - 1) / ranks, wrong);
  std::fflush(stdout);
}

// The benchmark proper, after MPI is up; returns the exit status. Throws tessel::Error when a
// collective fails.
int run(const Config& c, const MpiEnvironment& mpi) {
  const int rank = mpi_rank(), n = mpi_size();
  std::vector<std::unique_ptr<Communicator>> comms;
  if (c.local == 1) {
    comms.push_back(make_mpi_communicator());
  } else {
    comms = make_hierarchical_communicators(c.local);
  }
  const int ranks = comms[0]->size();
  MPI_Comm world = MPI_COMM_NULL;
  if (c.interleave) MPI_Comm_dup(MPI_COMM_WORLD, &world);
  CollectiveOptions options;
  options.timeout = std::chrono::seconds(60);
  if (rank == 0) {
    std::printf(
        "# tessel all_reduce over MPI (%s), f32 sum, out of place, %d processes x %d devices "
        "(%s; thread level %s)\n",
        c.local == 1 ? "make_mpi_communicator" : "make_hierarchical_communicators", n, c.local,
        mpi_library_version().c_str(),
        std::string(mpi_thread_level_name(mpi.thread_level())).c_str());
    std::printf(
        "# time: median over %d iters (after %d warm-up) of one call's time on its slowest rank\n",
        c.iters, c.warmup);
    std::printf("# %-16s  %10s  %12s  %10s  %10s  %10s  %6s\n", "algorithm", "bytes", "count", "time_us",
                "algbw_gbps", "busbw_gbps", "wrong");
  }
  int64_t total_wrong = 0;
  for (Algorithm algorithm : c.algorithms) {
    options.algorithm = algorithm;
    // -b >= 4 and -f >= 2: the sizes grow, so the sweep ends.
    for (int64_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= c.factor) {
      const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
      const Measured m = run_devices(c, comms, world, options, count);
      total_wrong += m.wrong;
      if (rank == 0) {
        const std::string name(algorithm_name(algorithm));
        print_row(name, bytes, ranks, m.slowest, c.warmup, m.wrong);
        if (c.interleave) print_row("mpi@" + name, bytes, ranks, m.raw_slowest, c.warmup, 0);
      }
      if (bytes > c.max_bytes / c.factor) break;
    }
  }
  comms.clear();
  if (c.interleave) MPI_Comm_free(&world);
  return total_wrong == 0 ? 0 : 1;
}

// How long a process that reports a failed collective stays before it exits, with SIGTERM
// ignored. Open MPI's mpirun ends the whole job (SIGTERM, then SIGKILL a second later) as soon
// as one process exits non-zero: the first survivor to exit could get the others killed before
// they had reported. They learn of the loss within the 100 ms watch period of tessel/comm/mpi.h.
constexpr std::chrono::milliseconds kReportGrace{300};

// This process's rank in MPI_COMM_WORLD once MPI is up (fail() may not ask MPI: it may be gone).
int g_rank = -1;

// Reports a failure of this process and ends it: std::_Exit, because MPI_Finalize (run by
// MpiEnvironment's destructor when no lost peer was seen, e.g. after a deadline) would wait for
// a process that may be gone.
[[noreturn]] void fail(const std::string& what) {
  std::signal(SIGTERM, SIG_IGN);  // already on the way out: finish the report (kReportGrace)
  std::fflush(stdout);
  if (g_rank >= 0) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", kProgram, g_rank, what.c_str());
  } else {
    std::fprintf(stderr, "%s: error: %s\n", kProgram, what.c_str());
  }
  std::fflush(stderr);
  if (g_rank >= 0) std::this_thread::sleep_for(kReportGrace);
  std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  // Outside the try: MpiEnvironment's destructor would call MPI_Finalize during the unwinding,
  // before the handler, and could wait there for a process that is gone.
  std::optional<MpiEnvironment> mpi;
  try {
    mpi.emplace(&argc, &argv);
    g_rank = mpi_rank();
    Config config;
    try {
      config = parse_args(argc, argv);
    } catch (const UsageError& e) {
      if (g_rank == 0) std::fprintf(stderr, "%s: error: %s\n", kProgram, e.message.c_str());
      return 2;
    }
    return run(config, *mpi);
  } catch (const Error& e) {
    fail(e.what());
  } catch (const std::exception& e) {
    fail(std::string("unexpected exception: ") + e.what());
  }
}
