// SaveTransaction: plan which local device writes which shard, write one safetensors file per
// writing device into a temporary directory, then process 0 writes the manifest and renames the
// directory (docs/checkpoints.md has the protocol and the format).
#include "checkpoint/save_transaction.h"

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/chunk_crc.h"
#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "checkpoint/phase_clock.h"
#include "checkpoint/state_names.h"
#include "core/errors.h"
#include "core/stream_copy.h"
#include "tessel/checkpoint/safetensors.h"
#include "tessel/core/crc32c.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"

namespace tessel::checkpoint::detail {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kComponent = "checkpoint";

// The tensors of a state, Partial ones reduced, with what save needs to know about them.
struct SavedTensors {
  std::map<std::string, DTensor> tensors;
  Runtime* runtime = nullptr;  // theirs (one runtime per save)
  // The largest mesh among them, or when it lacks some other tensor's devices (tensors on
  // disjoint sub-meshes: a pipeline's stages) a 1-D mesh over all their devices, so that every
  // process holding a tensor takes part in the save's agreements.
  Mesh agreement_mesh;
};

// A mesh's devices by name: every process's where the mesh names them, else its own.
std::vector<std::string> device_names(const Mesh& mesh) {
  return mesh.global_devices().empty() ? mesh.local_devices() : mesh.global_devices();
}

// The agreement mesh of tensors on `meshes` (see SavedTensors). The union is ordered by device
// name, so that every process makes the same mesh.
Mesh agreement_mesh_of(const std::vector<Mesh>& meshes) {
  Mesh largest;
  for (const Mesh& m : meshes) {
    if (m.size() > largest.size()) largest = m;
  }
  const std::vector<std::string> covered = device_names(largest);
  std::set<std::string> all(covered.begin(), covered.end()), local;
  bool covers = true;
  for (const Mesh& m : meshes) {
    for (const std::string& name : device_names(m)) covers = !all.insert(name).second && covers;
    local.insert(m.local_devices().begin(), m.local_devices().end());
  }
  if (covers) return largest;
  const std::vector<std::string> names(all.begin(), all.end());
  std::vector<int64_t> ids, local_ids;
  std::vector<std::string> local_names;
  for (size_t i = 0; i < names.size(); ++i) {
    ids.push_back(static_cast<int64_t>(i));
    if (local.count(names[i]) != 0) {
      local_ids.push_back(static_cast<int64_t>(i));
      local_names.push_back(names[i]);
    }
  }
  return Mesh({"x"}, {static_cast<int64_t>(names.size())}, ids, local_ids, local_names, "",
              names);
}

SavedTensors collect_tensors(const State& state, std::chrono::milliseconds timeout) {
  SavedTensors out;
  std::vector<Mesh> meshes;
  for (const auto& [name, item] : state) {
    const DTensor* d = std::get_if<DTensor>(&item);
    if (d == nullptr) continue;
    if (!d->defined() || d->is_abstract()) {
      tessel::detail::throw_invalid(kComponent, "tensor '{}' is {} DTensor", name,
                                    d->defined() ? "an abstract (traced)" : "a null");
    }
    safetensors_dtype_name(d->dtype());  // kInvalidArgument for a dtype safetensors lacks
    if (out.runtime != nullptr && out.runtime != &d->runtime()) {
      tessel::detail::throw_invalid(kComponent,
                                    "tensor '{}' belongs to another Runtime than the state's "
                                    "other tensors; save one runtime's tensors at a time",
                                    name);
    }
    out.runtime = &d->runtime();
    const RelayoutOptions reduce{timeout};
    DTensor saved =
        d->layout().is_partial() ? relayout(*d, d->layout().without_partial(), reduce) : *d;
    meshes.push_back(saved.layout().mesh());
    out.tensors.emplace(name, std::move(saved));
  }
  out.agreement_mesh = agreement_mesh_of(meshes);
  return out;
}

void check_values(const State& state) {
  for (const auto& [name, item] : state) {
    check_item_name(name);
    if (const double* v = std::get_if<double>(&item); v != nullptr && !std::isfinite(*v)) {
      tessel::detail::throw_invalid(kComponent, "value '{}' is {}: JSON has no such number", name,
                                    *v);
    }
  }
}

// The shards this process's devices write, per runtime device index. Every process computes the
// same choice: a block is written by holder (tensor ordinal + block ordinal) mod holders, which
// spreads replicated blocks over their holders. Empty blocks are not written; a tensor with no
// elements is one empty shard of its full shape at offset 0, so that readers see it.
std::map<int, std::vector<ShardToWrite>> plan_local_shards(const SavedTensors& saved) {
  std::map<int, std::vector<ShardToWrite>> plan;
  size_t next_ordinal = 0;
  for (const auto& [name, d] : saved.tensors) {
    const Mesh& mesh = d.layout().mesh();
    const size_t tensor_ordinal = next_ordinal++;      // counts every tensor, on every process
    if (mesh.num_local_devices() == 0) continue;       // a mesh of other processes only
    const std::vector<Tensor> components = unpack(d);  // waits for the devices' streams
    const std::vector<ShardMap::Replicas> blocks =
        ShardMap(d.layout(), d.shape()).distinct_blocks();
    const bool no_elements = d.shape().num_elements() == 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const ShardMap::Replicas& r = blocks[b];
      Box box{r.block.offsets, r.block.extents};
      if (no_elements) {
        if (b != 0) continue;
        box = Box{std::vector<int64_t>(d.shape().dims().size(), 0), d.shape().dims()};
      } else if (box.empty()) {
        continue;
      }
      const int64_t writer = r.device_offsets[(tensor_ordinal + b) % r.device_offsets.size()];
      for (int i = 0; i < mesh.num_local_devices(); ++i) {
        if (mesh.offset_of_device_id(mesh.local_device_ids()[i]) != writer) continue;
        const Tensor& component = components[static_cast<size_t>(i)];
        plan[d.device(i).index()].push_back(
            ShardToWrite{name, d.dtype(), box, component.data(), component});
      }
    }
  }
  return plan;
}

std::string file_name(int process, int device) {
  return fmt::format("process-{:05d}-device-{:05d}.safetensors", process, device);
}
std::string index_name(int process) { return fmt::format(".process-{:05d}.json", process); }

// Writes one device's shards as a safetensors file, left open for the flush; records the file and
// its shards in `index`, the time of each phase in `stats`.
std::unique_ptr<OutputFile> write_device_file(const fs::path& dir, const std::string& name,
                                              const std::vector<ShardToWrite>& shards,
                                              Manifest& index, SaveStats& stats) {
  auto clock = std::chrono::steady_clock::now();
  SafetensorsHeader header;
  nlohmann::json sharding = nlohmann::json::object();
  uint64_t next = 0;
  for (const ShardToWrite& s : shards) {
    const uint64_t bytes = s.num_bytes();
    header.entries.push_back({s.tensor, s.dtype, Shape(s.box.extents), next, next + bytes});
    sharding[s.tensor] = {{"saved_offsets", s.box.offsets}};
    next += bytes;
  }
  header.metadata["format"] = "pt";
  header.metadata["DCP_SHARDING_INFO"] = sharding.dump();
  const std::string head = header.encode();
  stats.header_seconds += lap(clock);

  auto out = std::make_unique<OutputFile>((dir / name).string());
  out->write(head.data(), head.size());
  stats.write_seconds += lap(clock);
  uint32_t file_crc = crc32c(head.data(), head.size());
  stats.checksum_seconds += lap(clock);
  for (const ShardToWrite& s : shards) {
    const size_t bytes = s.num_bytes();
    double write_seconds = 0;
    ChunkedCrc crc = chunked_crc(s.bytes, bytes, [&](const unsigned char* chunk, uint64_t n) {
      auto write_clock = std::chrono::steady_clock::now();
      out->write(chunk, n);
      write_seconds += lap(write_clock);
    });
    file_crc = crc32c_combine(file_crc, crc.whole, bytes);
    const double shard_seconds = lap(clock);
    stats.write_seconds += write_seconds;
    stats.checksum_seconds += shard_seconds - write_seconds;
    index.tensors[s.tensor].shards.push_back(
        SavedShard{name, s.box.offsets, s.box.extents, crc.whole, std::move(crc.chunks)});
  }
  index.files[name] = SavedFile{out->size(), file_crc};
  stats.bytes_written += static_cast<int64_t>(out->size());
  ++stats.files;
  return out;
}

// Writes every local device's file, one after another (one stream to the storage, as dd's; the
// kernel writes each back as it goes, OutputFile), then flushes them all; returns the files' and
// shards' index entries.
Manifest write_device_files(const fs::path& dir, int process,
                            const std::map<int, std::vector<ShardToWrite>>& plan,
                            SaveStats& stats) {
  Manifest index;
  std::vector<std::unique_ptr<OutputFile>> files;
  for (const auto& [device, shards] : plan) {
    files.push_back(write_device_file(dir, file_name(process, device), shards, index, stats));
  }
  auto clock = std::chrono::steady_clock::now();
  for (const std::unique_ptr<OutputFile>& f : files) f->sync_and_close();
  stats.sync_seconds += lap(clock);
  return index;
}

// std::filesystem errors as tessel's kUnavailable (the storage refused: read-only, full, no
// permission), naming the path and the system's reason.
template <typename Fn>
void filesystem_step(std::string_view what, const fs::path& path, Fn&& fn) {
  try {
    fn();
  } catch (const fs::filesystem_error& e) {
    tessel::detail::throw_error(ErrorCode::kUnavailable, kComponent, "cannot {} '{}': {}", what,
                                path.string(), e.code().message());
  }
}

// Adds the files and shards of every process's index in `tmp` to `m` (the indexes then removed:
// the committed directory holds only the format).
void merge_indexes(Manifest& m, const fs::path& tmp) {
  m.processes = 0;
  std::vector<fs::path> indexes;
  filesystem_step("list", tmp, [&] {
    for (const fs::directory_entry& e : fs::directory_iterator(tmp)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(".process-") && name.ends_with(".json")) indexes.push_back(e.path());
    }
  });
  for (const fs::path& index : indexes) {
    m.merge_index(Manifest::parse(read_file(index.string()), index.string()));
    filesystem_step("remove", index, [&] { fs::remove(index); });
    ++m.processes;
  }
}

}  // namespace

SaveTransaction::SaveTransaction(const std::string& directory, const State& state,
                                 const SaveOptions& options, size_t max_bytes)
    : directory_(directory),
      options_(options),
      max_bytes_(max_bytes),
      started_(std::chrono::steady_clock::now()) {
  check_values(state);
  const fs::path final_dir = fs::path(directory).lexically_normal();
  dir_ = final_dir.has_filename() ? final_dir : final_dir.parent_path();
  parent_ = dir_.parent_path().empty() ? fs::path(".") : dir_.parent_path();
  bool exists = false, parent_exists = false;
  filesystem_step("inspect", dir_, [&] {
    exists = fs::exists(dir_);
    parent_exists = fs::is_directory(parent_);
  });
  if (exists) {
    tessel::detail::throw_error(ErrorCode::kAlreadyExists, kComponent,
                                "'{}' exists; a checkpoint is never overwritten", dir_.string());
  }
  if (!parent_exists) {
    tessel::detail::throw_error(ErrorCode::kNotFound, kComponent,
                                "the parent directory '{}' of checkpoint '{}' does not exist",
                                parent_.string(), dir_.string());
  }
  tmp_ = parent_ / ("." + dir_.filename().string() + ".tmp");

  SavedTensors saved = collect_tensors(state, options.timeout);
  process_ = saved.runtime != nullptr ? saved.runtime->options().task : 0;
  const Mesh& mesh = saved.agreement_mesh;
  spans_processes_ = !mesh.is_empty() && mesh.num_local_devices() < mesh.size();
  agreement_.emplace(mesh, saved.runtime, process_, options.timeout);
  manifest_.mesh = mesh.is_empty() ? "" : mesh.to_string();
  for (const auto& [name, d] : saved.tensors) {
    manifest_.tensors[name] = SavedTensor{d.dtype(), d.shape(), d.layout().to_string(), {}};
  }
  for (const auto& [name, item] : state) {
    std::visit(
        [&, &name = name](const auto& v) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(v)>, DTensor>)
            manifest_.values[name] = v;
        },
        item);
  }
  plan_ = plan_local_shards(saved);
  auto clock = started_;
  stats_.plan_seconds = lap(clock);
  if (spans_processes_) {
    try {
      prepare();  // the processes agree on it (and on every one's bytes) before any writes
    } catch (...) {
      remove_temporary();  // the destructor of an object whose constructor threw does not run
      throw;
    }
  } else {
    check_bytes();
  }
}

void SaveTransaction::check_bytes() const {
  if (bytes_to_write() <= max_bytes_) return;
  tessel::detail::throw_error(
      ErrorCode::kResourceExhausted, kComponent,
      "the save of '{}' stages {} bytes of shards on process {}; the "
      "staging budget (AsyncCheckpointerOptions::staging_bytes) is {} bytes",
      directory_, bytes_to_write(), process_, max_bytes_);
}

void SaveTransaction::prepare() {
  if (prepared_) return;
  prepared_ = true;
  agreement_->run_step("prepared", [&] {
    check_bytes();
    if (process_ != 0) return;
    filesystem_step("remove the stale temporary directory", tmp_, [&] { fs::remove_all(tmp_); });
    filesystem_step("create", tmp_, [&] { fs::create_directory(tmp_); });
  });
  notify("prepared");
}

SaveTransaction::~SaveTransaction() {
  if (!committed_) remove_temporary();
}

void SaveTransaction::remove_temporary() noexcept {
  if (process_ != 0 || !prepared_) return;
  std::error_code ignored;  // cleanup after an error that is already reported
  fs::remove_all(tmp_, ignored);
}

size_t SaveTransaction::bytes_to_write() const {
  size_t total = 0;
  for (const auto& [device, shards] : plan_) {
    for (const ShardToWrite& s : shards) total += s.num_bytes();
  }
  return total;
}

void SaveTransaction::stage(Tensor staging) {
  if (staging.nbytes() < bytes_to_write()) {
    tessel::detail::throw_error(ErrorCode::kInternal, kComponent,
                                "staging area of {} bytes for {} bytes of shards", staging.nbytes(),
                                bytes_to_write());
  }
  auto clock = std::chrono::steady_clock::now();
  auto* next = static_cast<unsigned char*>(staging.data());
  for (auto& [device, shards] : plan_) {
    for (ShardToWrite& s : shards) {
      tessel::detail::stream_copy(next, s.bytes, s.num_bytes());  // not read again soon
      s.bytes = next;
      s.owner = staging;
      next += s.num_bytes();
    }
  }
  stats_.stage_seconds = lap(clock);
}

void SaveTransaction::write() noexcept {
  try {
    if (!spans_processes_) prepare();  // nothing to agree on: the writer thread may do it
    const Manifest index = write_device_files(tmp_, process_, plan_, stats_);
    // Not flushed: process 0 reads it before writing the manifest, which is flushed, and a crash
    // before that commits nothing.
    write_file_unsynced((tmp_ / index_name(process_)).string(), index.to_json());
    plan_.clear();  // releases the shards (or the staging area)
  } catch (...) {
    write_failure_ = std::current_exception();
  }
}

void SaveTransaction::commit() {
  auto clock = std::chrono::steady_clock::now();
  agreement_->run_step("written", [&] {
    if (write_failure_) std::rethrow_exception(write_failure_);
  });
  notify("written");
  agreement_->run_step("committed", [&] {
    if (process_ != 0) return;
    merge_indexes(manifest_, tmp_);
    write_file((tmp_ / kManifestName).string(), manifest_.to_json());
    stats_.manifest_seconds = lap(clock);
    sync_directory(tmp_.string());
    notify("manifest");
    filesystem_step("rename", tmp_, [&] { fs::rename(tmp_, dir_); });
    committed_ = true;
    sync_directory(parent_.string());
    stats_.rename_seconds = lap(clock);
  });
  committed_ = true;
  if (process_ != 0) stats_.manifest_seconds = lap(clock);  // the agreements only
  notify("committed");
  stats_.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (options_.stats != nullptr) *options_.stats = stats_;
}

void SaveTransaction::notify(std::string_view step) const {
  if (options_.on_step) options_.on_step(step);
}

}  // namespace tessel::checkpoint::detail
