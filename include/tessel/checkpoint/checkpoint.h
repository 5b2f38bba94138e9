// Sharded checkpoints of distributed tensors: save(directory, state) and restore(directory,
// target), with Orbax's names (ocp.StandardCheckpointer().save / restore) in a namespace of
// their own, as PyTorch's torch.distributed.checkpoint (DCP) and Orbax keep theirs.
//
// A State is a flat map of names to DTensors and plain values (bool, integer, float, string):
// model parameters, optimizer moments, the step, RNG seeds, the data position. Names are paths
// ("model/wte", "opt/m/wte"; Python flattens nested dicts into them).
//
//   checkpoint::State state{{"w", w}, {"step", int64_t{100}}, {"seed", int64_t{7}}};
//   checkpoint::save("/ckpt/step-100", state);
//   // later, on any mesh, any layout, any process count:
//   checkpoint::State back = checkpoint::restore("/ckpt/step-100", {{"w", Layout(...)}});
//   std::get<DTensor>(back.at("w")); std::get<int64_t>(back.at("step"));
//
// The format (docs/checkpoints.md, readable without tessel): the directory holds one safetensors
// file per (process, local device) that writes, named process-PPPPP-device-DDDDD.safetensors,
// holding the shards that device writes (a replicated block is written once, by one of its
// holders, spread over the replicas), each file's __metadata__ carrying PyTorch DCP's
// "DCP_SHARDING_INFO" ({name: {"saved_offsets": [...]}}) so that DCP's HuggingFaceStorageReader
// can load and reshard it; and the manifest tessel.json (format version, each tensor's dtype,
// global shape, TF layout text and shards with their crc32c, each file's size and crc32c, the
// plain values), written last. Partial layouts are reduced (a collective) before writing.
//
// save is atomic: the files go into a temporary sibling directory ".<name>.tmp", are fsynced,
// the manifest last, then the directory is renamed to its name and the parent fsynced. A crash
// at any moment leaves no directory under the final name (CheckpointManager deletes the
// temporary ones later). Under several processes (SPMD: every process calls save with the same
// names), process 0 (the runtime's task 0) prepares the temporary directory, every process
// writes its own files, and process 0 writes the manifest and renames once all have written;
// the processes agree on each step by a collective over the largest mesh of the state (over all
// the tensors' devices when that mesh lacks some: tensors on disjoint sub-meshes), bounded by
// SaveOptions::timeout. The directory must be on storage every process sees.
//
// restore reads only the byte ranges each local device needs (a memory map of each file it
// touches), by intersecting its target block with the saved shards: no process holds a whole
// tensor unless its target layout says so. Each file read is checked against the manifest: its
// size, its header, and the crc32c of every shard it reads (RestoreOptions::verify).
//
// Errors (tessel::Error, component "checkpoint"): a bad name, a non-finite float, a tensor with
// a dtype safetensors lacks, a target whose rank or (template) shape/dtype differs from the
// saved one: kInvalidArgument naming it. The directory exists already: kAlreadyExists. No
// checkpoint at the directory, a target name not saved, a missing file: kNotFound naming the
// file and the tensor. A file whose size, header or crc32c disagrees with the manifest, a
// manifest that is not valid: kDataLoss naming the file and the tensor. Storage that refuses a
// write (read-only, full): kUnavailable naming the path, with nothing left behind. Another
// process failed: kAborted naming it; a process that does not reach a step in time:
// kDeadlineExceeded.
//
// Thread safety: save and restore of different directories may run concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"
#include "tessel/runtime/runtime.h"

namespace tessel::checkpoint {

// One entry of a state: a distributed tensor or a plain value.
using Item = std::variant<DTensor, bool, int64_t, double, std::string>;
using State = std::map<std::string, Item>;

// Where one save's time went on this process, in seconds, and what it wrote (filled when
// SaveOptions::stats is set, once the save has committed: for an AsyncCheckpointer, read it after
// wait()). The phases run in this order; total_seconds also counts what lies between them.
struct SaveStats {
  int64_t bytes_written = 0;  // this process's device files: safetensors headers and shards
  int64_t files = 0;          // device files this process wrote
  // Checks, Partial layouts reduced, the devices' streams waited for, the shards planned.
  double plan_seconds = 0;
  // The shards copied into the staging area (AsyncCheckpointer only; 0 for save()).
  double stage_seconds = 0;
  double header_seconds = 0;    // the safetensors headers serialised
  double write_seconds = 0;     // write() of headers and shards into the files (the page cache)
  double checksum_seconds = 0;  // the crc32c of the shards (per 256 KiB chunk) and of the files
  double sync_seconds = 0;      // the device files flushed to the storage (fdatasync)
  // The processes' agreement, their indexes merged, the manifest written and fsynced.
  double manifest_seconds = 0;
  // The temporary directory fsynced and renamed, the parent directory fsynced.
  double rename_seconds = 0;
  double total_seconds = 0;  // from the start of the save to its commit
};

struct SaveOptions {
  // Bounds each step the processes agree on (and the Partial reductions' collectives).
  std::chrono::milliseconds timeout{120000};
  // Test hook, called at each step of the protocol: "prepared" (temporary directory made) and
  // "written" (this process's files fsynced) on every process, "manifest" (manifest written and
  // fsynced, not yet renamed) on process 0 only, "committed" (renamed) on every process. Crash
  // tests kill the process here.
  std::function<void(std::string_view step)> on_step;
  SaveStats* stats = nullptr;  // if set, receives where the save's time went
};

// What a restore read, against what it needed (filled when RestoreOptions::stats is set).
struct RestoreStats {
  // The bytes of the saved shards the restore touched: each crc32c chunk it checked (256 KiB
  // pieces of a shard around the parts needed), or without verify the byte span of each part.
  int64_t bytes_read = 0;
  // The bytes of the elements this process's devices needed from the saved shards (a part that
  // several local devices need counted once).
  int64_t bytes_needed = 0;
  // Where the restore's time went on this process, in seconds. The phases are disjoint spans;
  // total_seconds also counts what lies between them (the DTensors built, the values).
  double open_seconds = 0;      // the manifest read; the files checked (size, header) and mapped
  double read_seconds = 0;      // the needed byte ranges of the mapped files brought into memory
  double allocate_seconds = 0;  // the devices' blocks allocated
  double crc_seconds = 0;       // chunks checked (crc32c) apart from a copy
  double copy_seconds = 0;      // the bytes copied into the devices' blocks
  double relayout_seconds = 0;  // Partial targets split into terms (relayout)
  double total_seconds = 0;     // from the start of the restore to its return
};

struct RestoreOptions {
  // Check the crc32c of the saved bytes read: each 256 KiB chunk of a shard around the parts
  // needed, once per process (a checkpoint without chunk checksums: each shard whole).
  bool verify = true;
  // Runtime of the restored DTensors (restore(dir, Target)); a template's DTensors bring theirs.
  Runtime* runtime = nullptr;  // nullptr: Runtime::global()
  RestoreStats* stats = nullptr;  // if set, receives what the restore read
};

// What restore builds: for each name, the layout to restore into (any mesh, any layout; the
// global shape and dtype are the saved ones).
using Target = std::map<std::string, Layout>;

// Writes `state` as the checkpoint `directory` (which must not exist; its parent must).
void save(const std::string& directory, const State& state, const SaveOptions& options = {});

// The tensors named in `target`, laid out as it says, plus every plain value saved.
State restore(const std::string& directory, const Target& target,
              const RestoreOptions& options = {});
// The same with a template: each DTensor of `like` gives its layout and runtime, and its shape
// and dtype must be the saved ones (kInvalidArgument naming both otherwise); plain values in
// `like` are ignored (the saved ones are returned).
State restore(const std::string& directory, const State& like, const RestoreOptions& options = {});

// What a checkpoint holds, from its manifest alone.
struct TensorInfo {
  DType dtype = DType::kF32;
  Shape shape;
  std::string layout;  // the saved layout's TF text (Partial reduced)
};
struct CheckpointInfo {
  std::map<std::string, TensorInfo> tensors;
  std::vector<std::string> values;  // names of the plain values
  std::vector<std::string> files;   // the data files
};
CheckpointInfo metadata(const std::string& directory);

// Reads every file in full and checks its size and crc32c against the manifest (kDataLoss or
// kNotFound naming the first bad file).
void verify(const std::string& directory);

}  // namespace tessel::checkpoint
