// Internal to `tessel bench checkpoint`: the asynchronous save's two figures, each against a
// baseline measured in the same run (docs/checkpoints.md, "Performance").
#pragma once

#include <cstdint>
#include <string>

#include "tessel/checkpoint/checkpoint.h"

namespace tessel::cli::bench {

// How long AsyncCheckpointer::save blocks its caller (median over `iters` saves after a warm-up
// save, each waited for before the next) against one memcpy of the same bytes into a buffer
// already touched (as the reused staging area is), on the caller's thread (as the snapshot
// copies); and where the blocked time went (SaveStats: plan, stage), and a memcpy of the same
// bytes piece by piece, one call per device block of the state (as the snapshot copied before it
// used streaming stores: glibc's memcpy uses them only above a size, 3/4 of the L3 cache).
struct AsyncBlocking {
  double save_seconds = 0;
  double memcpy_seconds = 0;
  double plan_seconds = 0;
  double stage_seconds = 0;
  double other_seconds = 0;  // blocked outside plan and stage: the staging area, the hand-over
  double memcpy_pieces_seconds = 0;
};
AsyncBlocking measure_async_blocking(const checkpoint::State& state, int64_t bytes,
                                     const std::string& root, int iters);

// GPT training (examples/gpt, configuration `config` on a local 2x2 mesh): `steps` steps without
// checkpoints, then `steps` steps saving the trainer's state asynchronously after every `every`
// steps but the last, and waiting for the last save (its time counts); `rounds` times
// alternating; the medians of each round's total time.
struct TrainingWithCheckpoints {
  double plain_seconds = 0;
  double async_seconds = 0;
  int64_t checkpoint_bytes = 0;
  int saves_per_round = 0;
};
TrainingWithCheckpoints measure_training_slowdown(const std::string& config,
                                                  const std::string& data, int64_t steps,
                                                  int64_t every, int rounds,
                                                  const std::string& root);

}  // namespace tessel::cli::bench
