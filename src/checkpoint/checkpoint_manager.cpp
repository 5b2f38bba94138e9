// CheckpointManager: step directories named so that listing finds the committed ones, the
// `latest` pointer replaced by rename, pruning and the removal of crashed saves' leftovers.
#include "tessel/checkpoint/checkpoint_manager.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>

#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "core/errors.h"

namespace tessel::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kComponent = "CheckpointManager";
constexpr std::string_view kStepPrefix = "step-";

// The step of a directory name "step-N", if it is one.
std::optional<int64_t> step_of(const std::string& name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const char* begin = name.data() + kStepPrefix.size();
  const char* end = name.data() + name.size();
  int64_t step = 0;
  auto [ptr, ec] = std::from_chars(begin, end, step);
  if (ec != std::errc() || ptr != end || begin == end || step < 0) return std::nullopt;
  return step;
}

// This process's index in a save of `state`: its tensors' runtime's task (0 without tensors).
int process_of(const State& state) {
  for (const auto& [name, item] : state) {
    if (const DTensor* d = std::get_if<DTensor>(&item); d != nullptr && d->defined()) {
      return d->runtime().options().task;
    }
  }
  return 0;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string directory, CheckpointManagerOptions options)
    : directory_(std::move(directory)), options_(std::move(options)) {
  if (options_.max_to_keep < 0) {
    tessel::detail::throw_invalid(kComponent, "max_to_keep {} is negative", options_.max_to_keep);
  }
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec || !fs::is_directory(directory_, ec)) {
    tessel::detail::throw_error(ErrorCode::kUnavailable, kComponent,
                                "cannot create the directory '{}': {}", directory_, ec.message());
  }
}

std::string CheckpointManager::step_directory(int64_t step) const {
  if (step < 0) tessel::detail::throw_invalid(kComponent, "step {} is negative", step);
  return (fs::path(directory_) / fmt::format("{}{:08d}", kStepPrefix, step)).string();
}

std::vector<int64_t> CheckpointManager::all_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(directory_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<int64_t> step = step_of(it->path().filename().string());
    std::error_code ignored;  // an entry that vanishes or cannot be read is not a step
    if (step && it->is_directory(ignored) &&
        fs::exists(it->path() / detail::kManifestName, ignored)) {
      steps.push_back(*step);
    }
  }
  if (ec) {
    tessel::detail::throw_error(ErrorCode::kUnavailable, kComponent, "cannot list '{}': {}",
                                directory_, ec.message());
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> CheckpointManager::latest_step() const {
  const std::vector<int64_t> steps = all_steps();
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

std::string CheckpointManager::existing_step(int64_t step) const {
  const std::string dir = step_directory(step);
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / detail::kManifestName, ec)) {
    tessel::detail::throw_error(ErrorCode::kNotFound, kComponent,
                                "no checkpoint of step {} in '{}'", step, directory_);
  }
  return dir;
}

CheckpointManager::~CheckpointManager() = default;
CheckpointManager::CheckpointManager(CheckpointManager&&) noexcept = default;
CheckpointManager& CheckpointManager::operator=(CheckpointManager&&) noexcept = default;

void CheckpointManager::save(int64_t step, const State& state, bool async) {
  const std::string dir = step_directory(step);
  const bool cleans_up = process_of(state) == 0;
  if (!async) {
    wait_until_finished();
    checkpoint::save(dir, state, options_.save);
    if (cleans_up) clean_up(step);
    return;
  }
  if (!async_) {
    async_ = std::make_unique<AsyncCheckpointer>(
        AsyncCheckpointerOptions{.staging_bytes = options_.staging_bytes, .save = options_.save});
  }
  std::function<void()> after_commit;
  if (cleans_up) {  // on the writer thread: a manager of its own (this one may move meanwhile)
    CheckpointManagerOptions cleaner;
    cleaner.max_to_keep = options_.max_to_keep;
    after_commit = [directory = directory_, cleaner, step] {
      CheckpointManager(directory, cleaner).clean_up(step);
    };
  }
  async_->save(dir, state, fmt::format("step {} ('{}')", step, dir), std::move(after_commit));
}

void CheckpointManager::wait_until_finished() {
  if (async_) async_->wait_until_finished();
}

void CheckpointManager::wait_until_finished(std::chrono::milliseconds timeout) {
  if (async_) async_->wait_until_finished(timeout);
}

void CheckpointManager::close() {
  if (async_) async_->close();
}

void CheckpointManager::clean_up(int64_t newest) {
  // `latest`: written beside, fsynced, renamed over the old one, the directory fsynced.
  const fs::path latest = fs::path(directory_) / "latest";
  const fs::path next = fs::path(directory_) / ".latest.tmp";
  const std::optional<int64_t> current = latest_step();
  const int64_t pointed = current ? std::max(*current, newest) : newest;
  detail::write_file(next.string(), fs::path(step_directory(pointed)).filename().string() + "\n");
  std::error_code ec;
  fs::rename(next, latest, ec);
  if (ec) {
    tessel::detail::throw_error(ErrorCode::kUnavailable, kComponent,
                                "cannot rename '{}' to '{}': {}", next.string(), latest.string(),
                                ec.message());
  }
  detail::sync_directory(directory_);

  std::error_code ignored;  // leftovers that cannot be removed now are tried again next time
  std::vector<fs::path> leftovers;
  for (fs::directory_iterator it(directory_, ignored), end; !ignored && it != end;
       it.increment(ignored)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(".step-") && name.ends_with(".tmp")) leftovers.push_back(it->path());
  }
  for (const fs::path& p : leftovers) fs::remove_all(p, ignored);
  if (options_.max_to_keep == 0) return;
  const std::vector<int64_t> steps = all_steps();
  const size_t keep = static_cast<size_t>(options_.max_to_keep);
  for (size_t i = 0; i + keep < steps.size(); ++i)
    fs::remove_all(step_directory(steps[i]), ignored);
}

State CheckpointManager::restore(int64_t step, const Target& target,
                                 const RestoreOptions& options) const {
  return checkpoint::restore(existing_step(step), target, options);
}

State CheckpointManager::restore(int64_t step, const State& like,
                                 const RestoreOptions& options) const {
  return checkpoint::restore(existing_step(step), like, options);
}

}  // namespace tessel::checkpoint
