// CheckpointManager: the checkpoints of a training run in one directory, one per step, with
// Orbax's names (ocp.CheckpointManager: save(step, state), restore(step, target), latest_step(),
// all_steps(), max_to_keep).
//
//   checkpoint::CheckpointManager manager("/runs/gpt", {.max_to_keep = 3});
//   manager.save(100, state);                          // /runs/gpt/step-00000100/
//   if (auto step = manager.latest_step()) state = manager.restore(*step, target);
//
// The directory holds step-NNNNNNNN/ checkpoints (save(), checkpoint.h: each committed by a
// rename, so a directory under that name is complete) and the file `latest` naming the newest
// (replaced atomically after each save: written beside, fsynced, renamed). latest_step() is the
// newest committed step, found by listing: a crash between a commit and the `latest` update
// loses nothing. After each save process 0 deletes the oldest steps beyond max_to_keep and the
// temporary directories that crashed saves left (".step-*.tmp").
//
// save(step, state, /*async=*/true) saves through an AsyncCheckpointer (async_checkpointer.h):
// it returns once the shards are staged, and the pruning and `latest` follow the background
// commit; wait_until_finished() waits for it (Orbax's names), and a background failure is thrown
// by the next save, wait_until_finished or close naming the step. A synchronous save waits for
// an asynchronous one first.
//
// Errors: save of a step that exists: kAlreadyExists; a negative step, max_to_keep < 0:
// kInvalidArgument; restore of a step not saved: kNotFound; the rest as save and restore.
// Thread safety: one manager per directory per process; calls in one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/checkpoint/async_checkpointer.h"
#include "tessel/checkpoint/checkpoint.h"

namespace tessel::checkpoint {

struct CheckpointManagerOptions {
  int max_to_keep = 0;  // the newest steps kept; 0 keeps every step
  SaveOptions save;     // passed to every save
  int64_t staging_bytes = AsyncCheckpointerOptions{}.staging_bytes;  // of asynchronous saves
};

class CheckpointManager {
 public:
  // Creates `directory` (and its parents) if it does not exist.
  explicit CheckpointManager(std::string directory, CheckpointManagerOptions options = {});
  ~CheckpointManager();  // waits for an asynchronous save (its error dropped: call close())
  CheckpointManager(CheckpointManager&&) noexcept;
  CheckpointManager& operator=(CheckpointManager&&) noexcept;

  const std::string& directory() const { return directory_; }
  // directory/step-NNNNNNNN (8 digits or more).
  std::string step_directory(int64_t step) const;

  void save(int64_t step, const State& state, bool async = false);
  // The asynchronous save in flight (if any) is committed; its error thrown. The deadline
  // defaults to options.save.timeout (kDeadlineExceeded past it).
  void wait_until_finished();
  void wait_until_finished(std::chrono::milliseconds timeout);
  void close();  // wait_until_finished(), then frees the staging area
  State restore(int64_t step, const Target& target, const RestoreOptions& options = {}) const;
  State restore(int64_t step, const State& like, const RestoreOptions& options = {}) const;

  // Committed steps, ascending.
  std::vector<int64_t> all_steps() const;
  std::optional<int64_t> latest_step() const;

 private:
  std::string existing_step(int64_t step) const;  // kNotFound if not committed
  void clean_up(int64_t newest);                  // process 0 after a save

  std::string directory_;
  CheckpointManagerOptions options_;
  std::unique_ptr<AsyncCheckpointer> async_;  // made by the first asynchronous save
};

}  // namespace tessel::checkpoint
