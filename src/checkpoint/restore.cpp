// restore(): each local device of the target layout allocates its block and copies into it the
// parts of the saved shards that overlap it (box intersection), straight from memory-mapped
// files; then metadata() and verify(), which read the manifest and the whole files.
#include <chrono>
#include <filesystem>

#include <fmt/ranges.h>

#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "checkpoint/phase_clock.h"
#include "checkpoint/saved_shard_reader.h"
#include "core/errors.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/core/crc32c.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"

namespace tessel::checkpoint {
namespace {

using detail::Manifest;
using detail::SavedShard;
using detail::SavedTensor;
constexpr std::string_view kComponent = "checkpoint";

const SavedTensor& saved_tensor(const Manifest& m, const std::string& directory,
                                const std::string& name) {
  auto it = m.tensors.find(name);
  if (it == m.tensors.end()) {
    tessel::detail::throw_error(ErrorCode::kNotFound, kComponent,
                                "checkpoint '{}' has no tensor '{}'", directory, name);
  }
  return it->second;
}

// The tensor `name` laid out as `layout` on `runtime`'s devices.
DTensor restore_tensor(const std::string& name, const SavedTensor& saved, const Layout& layout,
                       Runtime& runtime, detail::SavedShardReader& reader,
                       RestoreStats& stats) {
  if (layout.rank() != saved.shape.rank()) {
    tessel::detail::throw_invalid(kComponent,
                                  "tensor '{}' was saved with shape {}; the target layout has "
                                  "rank {}: {}",
                                  name, saved.shape.to_string(), layout.rank(), layout.to_string());
  }
  // A Partial target is restored replicated over its partial dims, then split into terms.
  const Layout direct = layout.without_partial();
  const Mesh& mesh = direct.mesh();
  const ShardMap map(direct, saved.shape);
  std::vector<Tensor> components;
  for (int i = 0; i < mesh.num_local_devices(); ++i) {
    const ShardBlock& block = map.block(mesh.offset_of_device_id(mesh.local_device_ids()[i]));
    const Box target{block.offsets, block.extents};
    Tensor component;
    {
      const detail::AddElapsed timer(stats.allocate_seconds);
      component = runtime.device(mesh.local_devices()[i])
                      .allocate(Shape(block.extents), saved.dtype, false);
    }
    int64_t covered = 0;
    for (const SavedShard& shard : saved.shards) {
      const Box region = intersect(target, shard.box());
      if (region.empty()) continue;
      reader.copy(name, shard, region, component.data(), target);
      covered += region.num_elements();
    }
    if (covered != target.num_elements()) {
      tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                  "tensor '{}': the saved shards cover {} of the {} elements of "
                                  "block {}",
                                  name, covered, target.num_elements(), target.to_string());
    }
    components.push_back(std::move(component));
  }
  DTensor out(direct, saved.shape, saved.dtype, std::move(components), runtime);
  if (!layout.is_partial()) return out;
  const detail::AddElapsed timer(stats.relayout_seconds);
  return relayout(out, layout);
}

void add_values(const Manifest& m, State& out) {
  for (const auto& [name, v] : m.values) {
    std::visit([&, &name = name](const auto& x) { out[name] = x; }, v);
  }
}

// The manifest of `directory`, its reading timed as part of the open phase.
Manifest read_manifest(const std::string& directory, RestoreStats& stats) {
  const detail::AddElapsed timer(stats.open_seconds);
  return Manifest::read(directory);
}

// Hands `stats` to the caller, if asked, with the total time since `started`.
void report(const RestoreOptions& options, RestoreStats& stats,
            std::chrono::steady_clock::time_point started) {
  stats.total_seconds = detail::lap(started);
  if (options.stats != nullptr) *options.stats = stats;
}

}  // namespace

State restore(const std::string& directory, const Target& target, const RestoreOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  RestoreStats stats;
  const Manifest m = read_manifest(directory, stats);
  Runtime& runtime = options.runtime != nullptr ? *options.runtime : Runtime::global();
  detail::SavedShardReader reader(directory, m, options.verify, stats);
  State out;
  for (const auto& [name, layout] : target) {
    out[name] =
        restore_tensor(name, saved_tensor(m, directory, name), layout, runtime, reader, stats);
  }
  add_values(m, out);
  report(options, stats, started);
  return out;
}

State restore(const std::string& directory, const State& like, const RestoreOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  RestoreStats stats;
  const Manifest m = read_manifest(directory, stats);
  detail::SavedShardReader reader(directory, m, options.verify, stats);
  State out;
  for (const auto& [name, item] : like) {
    const DTensor* t = std::get_if<DTensor>(&item);
    if (t == nullptr) continue;
    if (!t->defined())
      tessel::detail::throw_invalid(kComponent, "template '{}' is a null DTensor", name);
    const SavedTensor& saved = saved_tensor(m, directory, name);
    if (t->shape() != saved.shape || t->dtype() != saved.dtype) {
      tessel::detail::throw_invalid(kComponent,
                                    "template '{}' is {} {}; the checkpoint holds {} {}", name,
                                    dtype_name(t->dtype()), t->shape().to_string(),
                                    dtype_name(saved.dtype), saved.shape.to_string());
    }
    out[name] = restore_tensor(name, saved, t->layout(), t->runtime(), reader, stats);
  }
  add_values(m, out);
  report(options, stats, started);
  return out;
}

CheckpointInfo metadata(const std::string& directory) {
  const Manifest m = Manifest::read(directory);
  CheckpointInfo info;
  for (const auto& [name, t] : m.tensors)
    info.tensors[name] = TensorInfo{t.dtype, t.shape, t.layout};
  for (const auto& [name, v] : m.values) info.values.push_back(name);
  for (const auto& [name, f] : m.files) info.files.push_back(name);
  return info;
}

void verify(const std::string& directory) {
  const Manifest m = Manifest::read(directory);
  // The tensors with shards in each file, for the messages.
  std::map<std::string, std::vector<std::string>> holders;
  for (const auto& [tensor, t] : m.tensors) {
    for (const SavedShard& s : t.shards) holders[s.file].push_back(tensor);
  }
  for (const auto& [name, f] : m.files) {
    const std::string path = (std::filesystem::path(directory) / name).string();
    const std::string held = fmt::format("'{}'", fmt::join(holders[name], "', '"));
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tessel::detail::throw_error(ErrorCode::kNotFound, kComponent,
                                  "'{}' (holding tensors {}) is missing", path, held);
    }
    const detail::MappedFile map(path);
    if (map.size() != f.size) {
      tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                  "'{}' (holding tensors {}) has {} bytes; the manifest says {}",
                                  path, held, map.size(), f.size);
    }
    const uint32_t crc = crc32c(map.data(), map.size());
    if (crc != f.crc32c) {
      tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                  "'{}' (holding tensors {}) has crc32c {:#010x}; the manifest "
                                  "says {:#010x}",
                                  path, held, crc, f.crc32c);
    }
  }
}

}  // namespace tessel::checkpoint
