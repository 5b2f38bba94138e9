// tessel_mpi_allreduce: tessel's all-reduce across MPI processes, timed exactly like the raw
// MPI_Allreduce baseline bench/mpi_allreduce.c (bench/compare_mpi_2proc.sh runs both).
//
//   mpirun -np 2 tessel_mpi_allreduce -b 1M -e 64M -f 2 -n 20 -w 5 [--algorithm auto,ring,...]
//                                     [--devices-per-process L] [--interleave-mpi]
//
// One communicator from make_mpi_communicator (1 device per process), or with
// --devices-per-process L > 1 the L communicators of make_hierarchical_communicators (one thread
// each; N = processes * L ranks), f32 sum, out of place, over the sizes -b..-e (times -f), for
// each algorithm listed (default auto). Before every call the ranks meet (the threads of a
// process, then the processes at MPI_Barrier, then the threads again); each rank times its own
// call with MPI_Wtime; one call's time is the slowest rank's; the reported time is the median
// over the -n timed calls (after -w untimed ones). algbw = bytes / time, busbw = algbw *
// 2(N-1)/N. After timing, one more call on fresh inputs (rank r's element j is 1 + (j + 3r) mod
// 8, as in mpi_allreduce.c) is checked against the exact sum; #wrong counts elements that
// differ, summed over ranks.
// --interleave-mpi (one device per process only): every timed tessel call is preceded by a
// timed raw MPI_Allreduce (on a duplicate of MPI_COMM_WORLD, same buffers, same timing), so the
// baseline sees the same machine at the same moment; its rows are named mpi@<algorithm>.
//
// Output (rank 0): '#' comment lines, then one row per algorithm and size:
//   algorithm bytes count time_us algbw_gbps busbw_gbps wrong
// Exit status 1 if any result is wrong, 2 on bad arguments.
#include <mpi.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"

namespace {

int64_t parse_size(const std::string& text) {
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || v < 0) return -1;
  switch (*end) {
    case '\0': return v;
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    default: return -1;
  }
  return end[1] == '\0' ? v : -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

float input_value(int rank, int64_t j) { return static_cast<float>(1 + (j + 3 * rank) % 8); }

}  // namespace

int main(int argc, char** argv) {
  using namespace tessel;
  MpiEnvironment mpi(&argc, &argv);
  const int rank = mpi_rank(), n = mpi_size();
  int64_t min_bytes = 4 << 10, max_bytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5, local = 1;
  bool interleave = false;
  std::vector<Algorithm> algorithms = {Algorithm::kAuto};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    const std::string value = has_value ? argv[i + 1] : "";
    bool ok = has_value;
    try {
      if (ok && flag == "-b") ok = (min_bytes = parse_size(value)) >= 0;
      else if (ok && flag == "-e") ok = (max_bytes = parse_size(value)) >= 0;
      else if (ok && flag == "-f") ok = (factor = std::atoll(value.c_str())) >= 2;
      else if (ok && flag == "-n") ok = (iters = std::atoi(value.c_str())) >= 1;
      else if (ok && flag == "-w") ok = (warmup = std::atoi(value.c_str())) >= 0;
      else if (ok && flag == "--devices-per-process") ok = (local = std::atoi(value.c_str())) >= 1;
      else if (flag == "--interleave-mpi") { interleave = true; ok = true; --i; }
      else if (ok && flag == "--algorithm") {
        algorithms.clear();
        size_t start = 0;
        while (start <= value.size()) {
          const size_t comma = value.find(',', start);
          algorithms.push_back(algorithm_from_name(value.substr(start, comma - start)));
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
      } else {
        ok = false;
      }
    } catch (const Error& e) {
      if (rank == 0) std::fprintf(stderr, "tessel_mpi_allreduce: error: %s\n", e.what());
      ok = false;
    }
    if (!ok) {
      if (rank == 0) std::fprintf(stderr, "tessel_mpi_allreduce: error: bad argument '%s'\n", flag.c_str());
      return 2;
    }
    ++i;
  }

  std::vector<std::unique_ptr<Communicator>> comms;
  if (local == 1) {
    comms.push_back(make_mpi_communicator());
  } else {
    comms = make_hierarchical_communicators(local);
  }
  const int ranks = comms[0]->size();
  if (interleave && local != 1) {
    if (rank == 0) std::fprintf(stderr, "tessel_mpi_allreduce: error: --interleave-mpi needs 1 device per process\n");
    return 2;
  }
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  CollectiveOptions options;
  options.timeout = std::chrono::seconds(60);
  if (rank == 0) {
    std::printf("# tessel all_reduce over MPI (%s), f32 sum, out of place, %d processes x %d devices "
                "(%s; thread level %s)\n",
                local == 1 ? "make_mpi_communicator" : "make_hierarchical_communicators", n, local,
                mpi_library_version().c_str(), std::string(mpi_thread_level_name(mpi.thread_level())).c_str());
    std::printf("# time: median over %d iters (after %d warm-up) of one call's time on its slowest rank\n",
                iters, warmup);
    std::printf("# %-16s  %10s  %12s  %10s  %10s  %10s  %6s\n", "algorithm", "bytes", "count", "time_us",
                "algbw_gbps", "busbw_gbps", "wrong");
  }
  int64_t total_wrong = 0;
  const int calls = warmup + iters;
  std::barrier meet(local);
  for (Algorithm algorithm : algorithms) {
    options.algorithm = algorithm;
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
      // Per local device: its time of every call, and its wrong elements.
      std::vector<std::vector<double>> times(static_cast<size_t>(local), std::vector<double>(static_cast<size_t>(calls)));
      std::vector<double> raw(static_cast<size_t>(calls), 0.0);
      std::vector<long long> wrong(static_cast<size_t>(local), 0);
      auto device = [&](int d) {
        Communicator& comm = *comms[static_cast<size_t>(d)];
        const int r = comm.rank();
        Tensor send = Tensor::empty(Shape{count}, DType::kF32);
        Tensor recv = Tensor::zeros(Shape{count}, DType::kF32);
        auto* s = static_cast<float*>(send.data());
        for (int64_t j = 0; j < count; ++j) s[j] = input_value(r, j);
        for (int i = 0; i < calls; ++i) {
          if (interleave) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, world);
            raw[static_cast<size_t>(i)] = MPI_Wtime() - t0;
          }
          meet.arrive_and_wait();
          if (d == 0) MPI_Barrier(MPI_COMM_WORLD);
          meet.arrive_and_wait();
          const double t0 = MPI_Wtime();
          comm.all_reduce(send, recv, ReduceOp::kSum, options);
          times[static_cast<size_t>(d)][static_cast<size_t>(i)] = MPI_Wtime() - t0;
        }
        // The checked call: fresh inputs, poisoned output.
        for (int64_t j = 0; j < count; ++j) s[j] = input_value(r, j);
        std::memset(recv.data(), 0xA5, static_cast<size_t>(count) * sizeof(float));
        comm.all_reduce(send, recv, ReduceOp::kSum, options);
        const auto* out = static_cast<const float*>(recv.data());
        for (int64_t j = 0; j < count; ++j) {
          float want = 0;
          for (int k = 0; k < ranks; ++k) want += input_value(k, j);
          if (out[j] != want) ++wrong[static_cast<size_t>(d)];
        }
      };
      std::vector<std::thread> threads;
      for (int d = 1; d < local; ++d) threads.emplace_back(device, d);
      device(0);
      for (auto& t : threads) t.join();
      std::vector<double> mine(static_cast<size_t>(calls), 0), slowest(static_cast<size_t>(calls));
      for (int d = 0; d < local; ++d) {
        for (int i = 0; i < calls; ++i) mine[i] = std::max(mine[i], times[d][i]);
      }
      MPI_Reduce(mine.data(), slowest.data(), calls, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      std::vector<double> raw_slowest(static_cast<size_t>(calls), 0.0);
      MPI_Reduce(raw.data(), raw_slowest.data(), calls, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      long long wrong_mine = 0, wrong_all = 0;
      for (long long w : wrong) wrong_mine += w;
      MPI_Reduce(&wrong_mine, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        const double t = median(std::vector<double>(slowest.begin() + warmup, slowest.end()));
        const double algbw = static_cast<double>(bytes) / t / 1e9;
        std::printf("  %-16s  %10lld  %12lld  %10.2f  %10.3f  %10.3f  %6lld\n",
                    std::string(algorithm_name(algorithm)).c_str(), static_cast<long long>(bytes),
                    static_cast<long long>(count), t * 1e6, algbw, algbw * 2.0 * (ranks - 1) / ranks, wrong_all);
        std::fflush(stdout);
        total_wrong += wrong_all;
        if (interleave) {
          const double b = median(std::vector<double>(raw_slowest.begin() + warmup, raw_slowest.end()));
          const double bw = static_cast<double>(bytes) / b / 1e9;
          std::printf("  %-16s  %10lld  %12lld  %10.2f  %10.3f  %10.3f  %6d\n",
                      ("mpi@" + std::string(algorithm_name(algorithm))).c_str(), static_cast<long long>(bytes),
                      static_cast<long long>(count), b * 1e6, bw, bw * 2.0 * (ranks - 1) / ranks, 0);
          std::fflush(stdout);
        }
      }
      if (bytes > max_bytes / factor) break;
    }
  }
  comms.clear();
  MPI_Comm_free(&world);
  return total_wrong == 0 ? 0 : 1;
}
