// The asynchronous save's figures of `tessel bench checkpoint`: blocking time against memcpy,
// and a training run's slowdown while checkpoints are written in the background.
#include "bench_checkpoint_async.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "bench_stats.h"
#include "char_dataset.h"
#include "gpt_trainer.h"
#include "tessel/checkpoint/async_checkpointer.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/core/median.h"
#include "tessel/dtensor/dtensor_api.h"

namespace tessel::cli::bench {

namespace fs = std::filesystem;

namespace {

// The byte size of each device block of the state's tensors.
std::vector<size_t> block_sizes(const checkpoint::State& state) {
  std::vector<size_t> sizes;
  for (const auto& [name, item] : state) {
    if (const DTensor* d = std::get_if<DTensor>(&item)) {
      for (const Tensor& block : unpack(*d)) sizes.push_back(block.nbytes());
    }
  }
  return sizes;
}

// memcpy of `sizes` pieces in turn from `from` to `to` (together at most their size).
void copy_pieces(const std::vector<char>& from, std::vector<char>& to,
                 const std::vector<size_t>& sizes) {
  size_t at = 0;
  for (const size_t n : sizes) {
    const size_t m = std::min(n, to.size() - at);
    std::memcpy(to.data() + at, from.data() + at, m);
    at += m;
  }
}

}  // namespace

AsyncBlocking measure_async_blocking(const checkpoint::State& state, int64_t bytes,
                                     const std::string& root, int iters) {
  std::vector<char> from(static_cast<size_t>(bytes), 1), to(static_cast<size_t>(bytes), 2);
  const std::vector<size_t> pieces = block_sizes(state);
  checkpoint::SaveStats stats;
  checkpoint::SaveOptions save_options;
  save_options.stats = &stats;
  checkpoint::AsyncCheckpointer saver({.staging_bytes = bytes, .save = save_options});
  std::vector<double> save_s, copy_s, plan_s, stage_s, other_s, pieces_s;
  for (int it = 0; it <= iters; ++it) {  // round 0 warms up (allocates the staging area)
    const std::string dir = root + "/async" + std::to_string(it);
    const double copy = seconds_of([&] { std::memcpy(to.data(), from.data(), to.size()); });
    const double piecewise = seconds_of([&] { copy_pieces(from, to, pieces); });
    const double save = seconds_of([&] { saver.save(dir, state); });
    saver.wait_until_finished();  // the stats are filled at the commit
    fs::remove_all(dir);
    if (it == 0) continue;
    copy_s.push_back(copy);
    pieces_s.push_back(piecewise);
    save_s.push_back(save);
    plan_s.push_back(stats.plan_seconds);
    stage_s.push_back(stats.stage_seconds);
    other_s.push_back(save - stats.plan_seconds - stats.stage_seconds);
  }
  saver.close();
  return {median(save_s), median(copy_s), median(plan_s),
          median(stage_s), median(other_s), median(pieces_s)};
}

namespace {

int64_t state_bytes(const checkpoint::State& state) {
  int64_t total = 0;
  for (const auto& [name, item] : state) {
    if (const DTensor* d = std::get_if<DTensor>(&item)) {
      total += d->shape().num_elements() * static_cast<int64_t>(dtype_size(d->dtype()));
    }
  }
  return total;
}

}  // namespace

TrainingWithCheckpoints measure_training_slowdown(const std::string& config,
                                                  const std::string& data, int64_t steps,
                                                  int64_t every, int rounds,
                                                  const std::string& root) {
  Runtime rt({.num_cpu_devices = 4});
  std::vector<std::string> names;
  for (const Device* d : rt.devices()) names.push_back(d->name());
  const Mesh mesh = Mesh::create_on_devices({{"batch", 2}, {"model", 2}}, names);
  gpt::GptTrainer trainer(gpt::GptConfig::preset(config), mesh, gpt::CharDataset::load(data), &rt);
  trainer.step();  // warm-up: first allocations, the op registry
  TrainingWithCheckpoints out;
  out.checkpoint_bytes = state_bytes(trainer.state());
  std::vector<double> plain_s, async_s;
  for (int r = 0; r < rounds; ++r) {
    Stopwatch watch;
    for (int64_t s = 0; s < steps; ++s) trainer.step();
    plain_s.push_back(watch.seconds());

    const std::string dir = root + "/train" + std::to_string(r);
    checkpoint::CheckpointManager manager(dir, {.max_to_keep = 2, .save = {}});
    out.saves_per_round = 0;
    watch.restart();
    for (int64_t s = 1; s <= steps; ++s) {
      trainer.step();
      if (s % every == 0 && s < steps) {
        manager.save(trainer.next_step(), trainer.state(), /*async=*/true);
        ++out.saves_per_round;
      }
    }
    manager.wait_until_finished();  // what the last save did not overlap counts too
    async_s.push_back(watch.seconds());
    manager.close();
    fs::remove_all(dir);
  }
  out.plain_seconds = median(plain_s);
  out.async_seconds = median(async_s);
  return out;
}

}  // namespace tessel::cli::bench
