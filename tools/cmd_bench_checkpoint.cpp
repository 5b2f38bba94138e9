// tessel bench checkpoint: checkpoint::save and restore (tessel/checkpoint/checkpoint.h) of a
// sharded state against the storage's own speed, as ratios: the same bytes written to one file
// and fdatasync'ed (dd conv=fdatasync), and read back (dd of the page cache).
//
// The state is --tensors f32 tensors of [rows, 1024] totalling --size bytes on a local batch x
// model mesh, laid out (batch, model). Each of --iters rounds times, in a fresh directory under
// --dir: the dd-style write and read, save (durable: every file and the manifest fsynced,
// renamed), restore onto the same layout, and restore onto (model, batch) (every device reads
// parts of other devices' files). Reported: the median time of each as GB/s and as a ratio to
// dd's, and the median of each phase of the save and of the restores (checkpoint::SaveStats,
// RestoreStats), with the restores' minor page faults. Every restored tensor
// is checked bit for bit; the exit status is 1 if any element differs. The directories are
// removed at the end.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench_checkpoint_async.h"
#include "bench_env.h"
#include "bench_stats.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "process_mesh.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"
#include "tessel/dtensor/dtensor_api.h"

namespace tessel::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHelp =
    "usage: tessel bench checkpoint [--mesh BxM] [--size BYTES] [--tensors N] [--iters N]\n"
    "                               [--dir DIR] [--gpt CONFIG] [--gpt-steps N] [--every N]\n"
    "                               [--data FILE] [--json]\n"
    "\n"
    "Times checkpoint save (durable) and restore of N f32 tensors [rows, 1024] laid out (batch,\n"
    "model) on a local BxM mesh, against the same bytes written to one file with fdatasync (dd\n"
    "conv=fdatasync) and read back (dd from the page cache); restore runs onto the same layout\n"
    "and onto (model, batch). Medians of --iters rounds, as GB/s and as ratios to dd's. Restored\n"
    "tensors are checked bit for bit; the exit status is 1 if any element differs.\n"
    "The save's phases (checkpoint::SaveStats: plan, header, write, checksum, fdatasync of the\n"
    "files, manifest, rename and directory fsyncs), medians in ms and as fractions of dd's time;\n"
    "the restores' (checkpoint::RestoreStats: open, read, allocate, crc, copy, relayout) and\n"
    "their minor page faults, the same way against dd's read.\n"
    "Bytes read by restores (crc-checked chunks) against the bytes they need: the two above and\n"
    "as process 0 of 2 and of 3 (a 1xN mesh with one local device, rows split N ways).\n"
    "Asynchronous save: the time save() blocks against one memcpy of the same bytes into a\n"
    "touched buffer on the caller's thread (as the snapshot copies into its reused staging area),\n"
    "its phases (plan, stage, the rest), and a memcpy of the bytes device block by block; and GPT\n"
    "training (examples/gpt on a 2x2 mesh) with an asynchronous checkpoint every --every steps\n"
    "against the same steps without, alternating, --iters rounds of --gpt-steps steps.\n"
    "\n"
    "  --mesh BxM     batch x model mesh of local CPU devices (default 2x2)\n"
    "  --size BYTES   total bytes of the state, e.g. 256M (default 256M)\n"
    "  --tensors N    how many tensors share them (default 4)\n"
    "  -n, --iters N  rounds (default 3)\n"
    "  --dir DIR      where to write (default: the system's temporary directory)\n"
    "  --gpt CONFIG   GPT configuration of the training figure (default tiny; none: skip it)\n"
    "  --gpt-steps N  training steps per round (default 20)\n"
    "  --every N      steps between asynchronous checkpoints (default 5)\n"
    "  --data FILE    training text (default data/shakespeare_char/input.txt)\n"
    "  --json         print {\"bytes\", \"dd_write_gbps\", \"save_gbps\", \"save_phases_s\" ({\"plan\",\n"
    "                 \"header\", \"write\", \"checksum\", \"sync\", \"manifest\", \"rename\",\n"
    "                 \"total\"}), \"dd_read_gbps\",\n"
    "                 \"restore_gbps\", \"reshard_gbps\", \"restore_phases_s\" and\n"
    "                 \"reshard_phases_s\" ({\"open\", \"read\", \"allocate\", \"crc\", \"copy\",\n"
    "                 \"relayout\", \"total\"}), \"restore_faults\", \"reshard_faults\",\n"
    "                 \"read_x_needed\" (4 restores), \"async_block_s\", \"memcpy_s\",\n"
    "                 \"async_phases_s\" ({\"plan\", \"stage\", \"other\"}), \"memcpy_blocks_s\",\n"
    "                 \"train_plain_s\", \"train_async_s\" (null with --gpt none), \"wrong\"}\n"
    "\n"
    "Bad arguments print 'tessel: error: <reason>' and exit with status 2.\n";

constexpr int64_t kColumns = 1024;

// dd if=/dev/zero of=path bs=1M conv=fdatasync, from a buffer of `bytes`.
void dd_write(const std::string& path, const std::vector<char>& buffer) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(ErrorCode::kUnavailable, "bench checkpoint", "cannot create " + path);
  constexpr size_t kBlock = 1 << 20;
  for (size_t at = 0; at < buffer.size(); at += kBlock) {
    const size_t n = std::min(kBlock, buffer.size() - at);
    if (::write(fd, buffer.data() + at, n) != static_cast<ssize_t>(n)) {
      ::close(fd);
      throw Error(ErrorCode::kUnavailable, "bench checkpoint", "cannot write " + path);
    }
  }
  ::fdatasync(fd);
  ::close(fd);
}

// dd if=path of=/dev/null bs=1M into `buffer`.
void dd_read(const std::string& path, std::vector<char>& buffer) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorCode::kUnavailable, "bench checkpoint", "cannot open " + path);
  constexpr size_t kBlock = 1 << 20;
  for (size_t at = 0; at < buffer.size(); at += kBlock) {
    if (::read(fd, buffer.data() + at, std::min(kBlock, buffer.size() - at)) <= 0) break;
  }
  ::close(fd);
}

int64_t count_wrong(const checkpoint::State& back, const std::map<std::string, Tensor>& host) {
  int64_t wrong = 0;
  for (const auto& [name, t] : host) {
    const Tensor got = to_host(std::get<DTensor>(back.at(name)));
    if (got.nbytes() != t.nbytes() || std::memcmp(got.data(), t.data(), t.nbytes()) != 0) {
      wrong += t.num_elements();
    }
  }
  return wrong;
}

// Restores every tensor of `ckpt` as process 0 of `processes` would onto a 1 x processes mesh
// laid out (model, unsharded): the rows split `processes` ways, the first part on this process's
// one device. Returns what it read against what it needed.
checkpoint::RestoreStats restore_as_first_process(const std::string& ckpt,
                                                  const checkpoint::Target& names, Runtime& rt,
                                                  int processes) {
  std::vector<int64_t> ids;
  for (int i = 0; i < processes; ++i) ids.push_back(i);
  const Mesh part({"batch", "model"}, {1, processes}, ids, {0}, {rt.devices()[0]->name()});
  checkpoint::Target target;
  for (const auto& [name, layout] : names) target[name] = Layout({"model", "unsharded"}, part);
  checkpoint::RestoreStats stats;
  checkpoint::restore(ckpt, target, {.runtime = &rt, .stats = &stats});
  return stats;
}

// A phase of a save or a restore (checkpoint::SaveStats, RestoreStats), as the bench reports it.
template <typename Stats>
struct Phase {
  const char* key;    // in --json's "save_phases_s" / "restore_phases_s"
  const char* label;  // in the table
  double Stats::*seconds;
};
using SavePhase = Phase<checkpoint::SaveStats>;
using RestorePhase = Phase<checkpoint::RestoreStats>;
constexpr SavePhase kSavePhases[] = {
    {"plan", "plan", &checkpoint::SaveStats::plan_seconds},
    {"header", "header", &checkpoint::SaveStats::header_seconds},
    {"write", "write", &checkpoint::SaveStats::write_seconds},
    {"checksum", "checksum", &checkpoint::SaveStats::checksum_seconds},
    {"sync", "fdatasync files", &checkpoint::SaveStats::sync_seconds},
    {"manifest", "manifest", &checkpoint::SaveStats::manifest_seconds},
    {"rename", "rename, directory fsyncs", &checkpoint::SaveStats::rename_seconds},
    {"total", "total", &checkpoint::SaveStats::total_seconds}};
constexpr RestorePhase kRestorePhases[] = {
    {"open", "open (manifest, maps)", &checkpoint::RestoreStats::open_seconds},
    {"read", "read (pages mapped)", &checkpoint::RestoreStats::read_seconds},
    {"allocate", "allocate device blocks", &checkpoint::RestoreStats::allocate_seconds},
    {"crc", "crc32c (apart from copy)", &checkpoint::RestoreStats::crc_seconds},
    {"copy", "copy into device memory", &checkpoint::RestoreStats::copy_seconds},
    {"relayout", "relayout (Partial)", &checkpoint::RestoreStats::relayout_seconds},
    {"total", "total", &checkpoint::RestoreStats::total_seconds}};

template <typename Stats>
double median_of(const std::vector<Stats>& runs, const Phase<Stats>& phase) {
  std::vector<double> seconds;
  for (const Stats& s : runs) seconds.push_back(s.*phase.seconds);
  return median(seconds);
}

template <typename Stats, size_t N>
Json phases_json(const std::vector<Stats>& runs, const Phase<Stats> (&phases)[N]) {
  Json out = Json::object();
  for (const Phase<Stats>& p : phases) out[p.key] = json_number(median_of(runs, p));
  return out;
}

// The process's minor page faults so far (getrusage): a restore's are its mappings' pages and its
// destination blocks' first touches.
int64_t minor_faults() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Restores `ckpt` onto `target`, timed; its stats and page faults appended to the runs.
checkpoint::State timed_restore(const std::string& ckpt, const checkpoint::Target& target,
                                Runtime& rt, std::vector<double>& seconds,
                                std::vector<checkpoint::RestoreStats>& runs,
                                std::vector<double>& faults) {
  checkpoint::State back;
  checkpoint::RestoreStats stats;
  const int64_t faults_before = minor_faults();
  seconds.push_back(bench::seconds_of(
      [&] { back = checkpoint::restore(ckpt, target, {.runtime = &rt, .stats = &stats}); }));
  faults.push_back(static_cast<double>(minor_faults() - faults_before));
  runs.push_back(stats);
  return back;
}

// The medians of each restore's phases, in ms and as fractions of dd's read time.
void print_restore_phases(const std::vector<checkpoint::RestoreStats>& same,
                          const std::vector<checkpoint::RestoreStats>& moved,
                          const std::vector<double>& same_faults,
                          const std::vector<double>& moved_faults, double dd_read_seconds) {
  std::printf("%-28s %8s %8s %8s %8s\n", "restore phases (medians)", "same ms", "x dd",
              "(m,b) ms", "x dd");
  for (const RestorePhase& p : kRestorePhases) {
    const double a = median_of(same, p), b = median_of(moved, p);
    std::printf("%-28s %8.2f %8.2f %8.2f %8.2f\n", p.label, a * 1e3, a / dd_read_seconds,
                b * 1e3, b / dd_read_seconds);
  }
  std::printf("%-28s %8.0f %8s %8.0f\n", "minor page faults", median(same_faults), "",
              median(moved_faults));
}

double read_ratio(const checkpoint::RestoreStats& s) {
  return static_cast<double>(s.bytes_read) / static_cast<double>(s.bytes_needed);
}

// The flags of bench checkpoint.
struct CheckpointFlags {
  std::pair<int64_t, int64_t> shape{2, 2};
  int64_t size = int64_t{256} << 20;
  int tensors = 4, iters = 3;
  std::string dir = fs::temp_directory_path().string();
  bool json = false;
  std::string gpt = "tiny", data = "data/shakespeare_char/input.txt";
  int64_t gpt_steps = 20, every = 5;
};

CheckpointFlags parse(const Args& args) {
  CheckpointFlags f;
  FlagParser flags("bench checkpoint");
  flags.custom({"--mesh"}, [&](const std::string& flag, const std::string& v) {
    f.shape = parse_mesh_shape(flags, flag, v);
  });
  flags.size({"--size"}, f.size, 4096, int64_t{1} << 36);
  flags.integer({"--tensors"}, f.tensors, 1, 1000);
  flags.integer({"-n", "--iters"}, f.iters, 1, 1000);
  flags.text({"--dir"}, f.dir);
  flags.set({"--json"}, f.json);
  flags.text({"--gpt"}, f.gpt);
  flags.integer({"--gpt-steps"}, f.gpt_steps, 1, 100000);
  flags.integer({"--every"}, f.every, 1, 100000);
  flags.text({"--data"}, f.data);
  flags.parse(args);
  return f;
}

int checkpoint_benchmark(const CheckpointFlags& f) {
  const int64_t rows = std::max<int64_t>(1, f.size / f.tensors / kColumns / 4);
  const int64_t bytes = rows * kColumns * 4 * f.tensors;
  // The host arrays, the sharded state, dd's buffer, the two restored states, the asynchronous
  // save's staging area and its memcpy baseline's two buffers.
  bench::check_fits_in_memory("bench checkpoint", 8.0 * static_cast<double>(bytes),
                              "--size " + std::to_string(bytes));

  const auto [batch, model] = f.shape;
  Runtime rt({.num_cpu_devices = static_cast<int>(batch * model)});
  const Mesh mesh = Mesh::create({{"batch", batch}, {"model", model}});
  const Layout saved({"batch", "model"}, mesh), resharded({"model", "batch"}, mesh);
  std::map<std::string, Tensor> host;
  checkpoint::State state;
  checkpoint::Target same, other;
  for (int i = 0; i < f.tensors; ++i) {
    const std::string name = "layer" + std::to_string(i) + "/w";
    host[name] = Tensor::random_uniform(Shape({rows, kColumns}), DType::kF32, 1000 + i, -1.0, 1.0);
    state[name] = copy_to_mesh(host[name], saved, rt);
    same[name] = saved;
    other[name] = resharded;
  }
  std::string root_text = (fs::path(f.dir) / "tessel-bench-checkpoint-XXXXXX").string();
  if (::mkdtemp(root_text.data()) == nullptr) {
    throw UsageError("bench checkpoint", "--dir: cannot make a directory under '" + f.dir + "'");
  }
  std::vector<char> buffer(static_cast<size_t>(bytes), 1);
  std::vector<double> dd_w, dd_r, save_s, restore_s, reshard_s, restore_faults, reshard_faults;
  std::vector<checkpoint::SaveStats> phases;
  std::vector<checkpoint::RestoreStats> restore_runs, reshard_runs;
  int64_t wrong = 0;
  checkpoint::RestoreStats same_read, reshard_read, half_read, third_read;
  bench::AsyncBlocking blocking;
  bench::TrainingWithCheckpoints training;
  try {
    for (int it = 0; it < f.iters; ++it) {
      const std::string ckpt = root_text + "/c" + std::to_string(it);
      const std::string raw = root_text + "/dd" + std::to_string(it);
      dd_w.push_back(bench::seconds_of([&] { dd_write(raw, buffer); }));
      dd_r.push_back(bench::seconds_of([&] { dd_read(raw, buffer); }));
      checkpoint::SaveStats save_stats;
      checkpoint::SaveOptions save_options;
      save_options.stats = &save_stats;
      save_s.push_back(bench::seconds_of([&] { checkpoint::save(ckpt, state, save_options); }));
      phases.push_back(save_stats);
      fs::remove(raw);  // after the save: the file system's work of the removal is not the save's
      const checkpoint::State back =
          timed_restore(ckpt, same, rt, restore_s, restore_runs, restore_faults);
      const checkpoint::State moved =
          timed_restore(ckpt, other, rt, reshard_s, reshard_runs, reshard_faults);
      same_read = restore_runs.back();
      reshard_read = reshard_runs.back();
      wrong += count_wrong(back, host) + count_wrong(moved, host);
      half_read = restore_as_first_process(ckpt, same, rt, 2);
      third_read = restore_as_first_process(ckpt, same, rt, 3);
      fs::remove_all(ckpt);
    }
    blocking = bench::measure_async_blocking(state, bytes, root_text, f.iters);
    if (f.gpt != "none") {
      training = bench::measure_training_slowdown(f.gpt, f.data, f.gpt_steps, f.every, f.iters,
                                                  root_text);
    }
  } catch (...) {
    fs::remove_all(root_text);
    throw;
  }
  fs::remove_all(root_text);

  const double gb = static_cast<double>(bytes) / 1e9;
  const double w = gb / median(dd_w), s = gb / median(save_s), r = gb / median(dd_r),
               rs = gb / median(restore_s), rr = gb / median(reshard_s);
  if (f.json) {
    Json out;
    out["bytes"] = bytes;
    out["dd_write_gbps"] = json_number(w);
    out["save_gbps"] = json_number(s);
    out["save_phases_s"] = phases_json(phases, kSavePhases);
    out["restore_phases_s"] = phases_json(restore_runs, kRestorePhases);
    out["reshard_phases_s"] = phases_json(reshard_runs, kRestorePhases);
    out["restore_faults"] = json_number(median(restore_faults));
    out["reshard_faults"] = json_number(median(reshard_faults));
    out["dd_read_gbps"] = json_number(r);
    out["restore_gbps"] = json_number(rs);
    out["reshard_gbps"] = json_number(rr);
    out["read_x_needed"] = {
        json_number(read_ratio(same_read)), json_number(read_ratio(reshard_read)),
        json_number(read_ratio(half_read)), json_number(read_ratio(third_read))};
    out["async_block_s"] = json_number(blocking.save_seconds);
    out["memcpy_s"] = json_number(blocking.memcpy_seconds);
    out["async_phases_s"] = {{"plan", json_number(blocking.plan_seconds)},
                             {"stage", json_number(blocking.stage_seconds)},
                             {"other", json_number(blocking.other_seconds)}};
    out["memcpy_blocks_s"] = json_number(blocking.memcpy_pieces_seconds);
    if (f.gpt != "none") {
      out["train_plain_s"] = json_number(training.plain_seconds);
      out["train_async_s"] = json_number(training.async_seconds);
    } else {
      out["train_plain_s"] = nullptr;
      out["train_async_s"] = nullptr;
    }
    out["wrong"] = wrong;
    print_json(out);
  } else {
    std::printf(
        "checkpoint of %.1f MiB (%d x f32 [%lld,%lld]) on mesh batch=%lld model=%lld, "
        "median of %d\n",
        static_cast<double>(bytes) / (1 << 20), f.tensors, static_cast<long long>(rows),
        static_cast<long long>(kColumns), static_cast<long long>(batch),
        static_cast<long long>(model), f.iters);
    std::printf("%-28s %8s %8s\n", "", "GB/s", "x dd");
    std::printf("%-28s %8.2f %8.2f\n", "dd write + fdatasync", w, 1.0);
    std::printf("%-28s %8.2f %8.2f\n", "save (durable)", s, s / w);
    std::printf("%-28s %8.2f %8.2f\n", "dd read (page cache)", r, 1.0);
    std::printf("%-28s %8.2f %8.2f\n", "restore, same layout", rs, rs / r);
    std::printf("%-28s %8.2f %8.2f\n", "restore, (model, batch)", rr, rr / r);
    std::printf("%-28s %8s %8s\n", "save phases (medians)", "ms", "x dd");
    for (const SavePhase& p : kSavePhases) {
      const double phase = median_of(phases, p);
      std::printf("%-28s %8.2f %8.2f\n", p.label, phase * 1e3, phase / median(dd_w));
    }
    print_restore_phases(restore_runs, reshard_runs, restore_faults, reshard_faults,
                         median(dd_r));
    std::printf("%-28s %8s %8s\n", "bytes read by a restore", "MiB", "x needed");
    const std::pair<const char*, const checkpoint::RestoreStats*> reads[] = {
        {"restore, same layout", &same_read},
        {"restore, (model, batch)", &reshard_read},
        {"process 0 of 2, 1x2 mesh", &half_read},
        {"process 0 of 3, 1x3 mesh", &third_read}};
    for (const auto& [what, stats] : reads) {
      std::printf("%-28s %8.1f %8.3f\n", what, static_cast<double>(stats->bytes_read) / (1 << 20),
                  read_ratio(*stats));
    }
    std::printf("%-28s %8s %8s\n", "", "ms", "x memcpy");
    std::printf("%-28s %8.2f %8.2f\n", "memcpy of the bytes", blocking.memcpy_seconds * 1e3, 1.0);
    std::printf("%-28s %8.2f %8.2f\n", "async save, blocked", blocking.save_seconds * 1e3,
                blocking.save_seconds / blocking.memcpy_seconds);
    const std::pair<const char*, double> async_phases[] = {
        {"  plan (checks, shards)", blocking.plan_seconds},
        {"  stage (copy of shards)", blocking.stage_seconds},
        {"  the rest (hand-over)", blocking.other_seconds},
        {"memcpy, block by block", blocking.memcpy_pieces_seconds}};
    for (const auto& [what, seconds] : async_phases) {
      std::printf("%-28s %8.2f %8.2f\n", what, seconds * 1e3, seconds / blocking.memcpy_seconds);
    }
    if (f.gpt != "none") {
      std::printf("gpt %s on 2x2, %lld steps, checkpoint of %.1f MiB every %lld steps (%d saves)\n",
                  f.gpt.c_str(), static_cast<long long>(f.gpt_steps),
                  static_cast<double>(training.checkpoint_bytes) / (1 << 20),
                  static_cast<long long>(f.every), training.saves_per_round);
      std::printf("%-28s %8s %8s\n", "", "s", "x plain");
      std::printf("%-28s %8.2f %8.2f\n", "training, no checkpoints", training.plain_seconds, 1.0);
      std::printf("%-28s %8.2f %8.2f\n", "training, async checkpoints", training.async_seconds,
                  training.async_seconds / training.plain_seconds);
    }
    std::printf("wrong elements: %lld\n", static_cast<long long>(wrong));
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int run_bench_checkpoint(const Args& args) {
  return run_command(args, kHelp, parse, checkpoint_benchmark);
}

}  // namespace tessel::cli
