// AsyncCheckpointer: save() copies the shards into a host staging area and returns; a writer
// thread writes and fsyncs the files and commits (Orbax's ocp.AsyncCheckpointer: save,
// wait_until_finished, close).
//
//   checkpoint::AsyncCheckpointer saver({.staging_bytes = int64_t{2} << 30});
//   saver.save("/ckpt/step-100", state);   // blocks only for the copy; training goes on
//   ...
//   saver.wait_until_finished();            // the checkpoint is committed (or its error thrown)
//
// The staging area is one host buffer (core's host allocator, so the process's memory limit sees
// it) of the bytes this process writes, kept and reused by the next save; a state whose shards
// exceed `staging_bytes` is kResourceExhausted, so that host memory never grows past the budget
// (agreed with the other processes before anything is written: theirs fail with kAborted).
// One save is in flight at a time: save() first waits for the previous one (bounded by the
// timeout). The writer is one thread, kept between saves, at a lower priority (nice 10) than the
// caller's, so that the background write yields the CPU to training. The commit is the synchronous
// save's (checkpoint.h): every file fsynced, the manifest last, the rename, so a crash while
// writing leaves no checkpoint under the name.
//
// Collectives: save() reduces Partial tensors and agrees on the temporary directory on the
// caller's thread, as save does. The writer thread runs none: when the state's mesh lies in this
// process, it also commits; when it spans processes, the writer only writes, and the agreement
// and commit run on the caller's thread at the next save(), wait_until_finished() or close(), so
// that they never interleave with the caller's own collectives on the same devices.
//
// Errors: those of the checks, the reduction and the copy are thrown by save(). Those of the
// background write and commit are thrown by the next save(), wait_until_finished() or close(),
// with their code and a message naming the save ("the background save of step 100 ...").
// A wait that passes its deadline is kDeadlineExceeded (the save stays in flight: wait again).
// The destructor waits for the writer and drops its error: call close() to see it.
// Thread safety: one thread calls a checkpointer at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessel/checkpoint/checkpoint.h"

namespace tessel::checkpoint {
namespace detail {
class BackgroundWriter;
}  // namespace detail

struct AsyncCheckpointerOptions {
  int64_t staging_bytes = int64_t{4} << 30;  // the host staging area's bound
  SaveOptions save;                          // its timeout bounds the agreements and every wait
};

class AsyncCheckpointer {
 public:
  explicit AsyncCheckpointer(AsyncCheckpointerOptions options = {});
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Starts saving `state` as `directory` (see checkpoint::save). `name` names the save in the
  // errors of its background part ("" : the directory). `after_commit` runs on the thread that
  // commits, after a successful commit (CheckpointManager prunes old steps there).
  void save(const std::string& directory, const State& state, const std::string& name = "",
            std::function<void()> after_commit = {});
  // Waits until the save in flight (if any) is committed; throws its error.
  void wait_until_finished(std::chrono::milliseconds timeout);
  void wait_until_finished();  // bounded by options.save.timeout
  // wait_until_finished(), then frees the staging area.
  void close();
  bool saving() const;  // a save is in flight (its result not yet taken by a wait)
  int64_t staging_bytes_allocated() const;

 private:
  struct InFlight;
  AsyncCheckpointerOptions options_;
  std::unique_ptr<InFlight> in_flight_;
  Tensor staging_;                                    // reused by every save while large enough
  std::unique_ptr<detail::BackgroundWriter> writer_;  // started by the first save
};

}  // namespace tessel::checkpoint
