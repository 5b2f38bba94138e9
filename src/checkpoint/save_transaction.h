// SaveTransaction: one save of a state as three phases, so that save() runs them in a row and
// AsyncCheckpointer runs the middle one on its writer thread (docs/checkpoints.md, "Saving").
//
//   SaveTransaction t(directory, state, options);  // checks; Partial reduced; shards planned
//   t.stage(staging);    // optional: the shards copied into host memory the caller owns
//   t.write();           // this process's files and index, fsynced (no collective; never throws)
//   t.commit();          // agreed; process 0 writes the manifest and renames; agreed again
//
// Process 0 makes the temporary directory ".<name>.tmp" ("prepared"): when the state's mesh
// spans processes, in the constructor, agreed with the others before anyone writes; within one
// process, in write(), so that an asynchronous save does no file system work on the caller's
// thread. The constructor and commit() agree with the other processes (collectives over the
// state's largest mesh, bounded by options.timeout); write() runs none, so it may run on another
// thread while the caller's devices go on with other collectives. A failure of write() is kept and
// reported by commit() (after the agreement, so that the other processes abort too). A
// transaction that is destroyed without a successful commit removes its temporary directory
// (process 0), leaving no partial checkpoint.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/process_agreement.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/core/box.h"
#include "tessel/core/tensor.h"

namespace tessel::checkpoint::detail {

// One shard a local device writes: `bytes` (the box's elements, row-major) live in `owner`.
struct ShardToWrite {
  std::string tensor;
  DType dtype = DType::kF32;
  Box box;  // where it lies in the global tensor
  const void* bytes = nullptr;
  Tensor owner;
  size_t num_bytes() const { return static_cast<size_t>(box.num_elements()) * dtype_size(dtype); }
};

class SaveTransaction {
 public:
  // `max_bytes` bounds the bytes this process writes (an asynchronous save's staging budget):
  // more is kResourceExhausted, agreed with the other processes before anything is written.
  SaveTransaction(const std::string& directory, const State& state, const SaveOptions& options,
                  size_t max_bytes = SIZE_MAX);
  ~SaveTransaction();
  SaveTransaction(const SaveTransaction&) = delete;
  SaveTransaction& operator=(const SaveTransaction&) = delete;

  // The bytes this process writes (its devices' shards, each replicated block once).
  size_t bytes_to_write() const;
  // Copies every shard into `staging` (host bytes, at least bytes_to_write(), owned by the
  // caller until write() returns), so that the state's tensors may change afterwards.
  void stage(Tensor staging);
  void write() noexcept;
  void commit();
  // True when the state's mesh spans several processes: commit() then runs collectives.
  bool spans_processes() const { return spans_processes_; }
  int process() const { return process_; }
  const std::string& directory() const { return directory_; }

 private:
  void prepare();            // the "prepared" step (once)
  void check_bytes() const;  // bytes_to_write() <= max_bytes_
  void notify(std::string_view step) const;
  void remove_temporary() noexcept;  // process 0's temporary directory, if any

  std::string directory_;
  std::filesystem::path dir_, parent_, tmp_;
  SaveOptions options_;
  size_t max_bytes_;
  int process_ = 0;
  bool spans_processes_ = false;
  std::optional<ProcessAgreement> agreement_;
  Manifest manifest_;  // the tensors' descriptions and the values; the files added at commit
  std::map<int, std::vector<ShardToWrite>> plan_;  // per runtime device index
  std::exception_ptr write_failure_;
  std::chrono::steady_clock::time_point started_;  // the constructor's start
  SaveStats stats_;  // this process's phases, given to options_.stats at the commit
  bool prepared_ = false;  // the temporary directory may exist (process 0 removes it on failure)
  bool committed_ = false;
};

}  // namespace tessel::checkpoint::detail
