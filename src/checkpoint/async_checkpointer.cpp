// AsyncCheckpointer: a SaveTransaction whose write (and, within one process, commit) runs on a
// writer thread (BackgroundWriter) while the caller goes on; the caller takes its result at the
// next save, wait or close.
#include "tessel/checkpoint/async_checkpointer.h"

#include "checkpoint/background_writer.h"
#include "checkpoint/save_transaction.h"
#include "core/errors.h"

namespace tessel::checkpoint {
namespace {

constexpr std::string_view kComponent = "checkpoint";

}  // namespace

struct AsyncCheckpointer::InFlight {
  std::unique_ptr<detail::SaveTransaction> transaction;
  std::string name;               // names the save in errors
  bool commit_on_caller = false;  // the mesh spans processes: the caller agrees and commits
  std::function<void()> after_commit;
};

AsyncCheckpointer::AsyncCheckpointer(AsyncCheckpointerOptions options)
    : options_(std::move(options)) {
  if (options_.staging_bytes < 0) {
    tessel::detail::throw_invalid(kComponent, "AsyncCheckpointer staging_bytes {} is negative",
                                  options_.staging_bytes);
  }
}

AsyncCheckpointer::~AsyncCheckpointer() {
  writer_.reset();  // waits for the job in flight, which uses in_flight_
}

void AsyncCheckpointer::save(const std::string& directory, const State& state,
                             const std::string& name, std::function<void()> after_commit) {
  wait_until_finished();
  auto next = std::make_unique<InFlight>();
  next->transaction = std::make_unique<detail::SaveTransaction>(
      directory, state, options_.save, static_cast<size_t>(options_.staging_bytes));
  detail::SaveTransaction& t = *next->transaction;
  next->name = name.empty() ? "'" + directory + "'" : name;
  next->commit_on_caller = t.spans_processes();
  next->after_commit = std::move(after_commit);
  const size_t bytes = t.bytes_to_write();
  if (!staging_.defined() || staging_.nbytes() < bytes) {
    staging_ = Tensor();  // the old area first: never two at once
    staging_ = Tensor::empty(Shape({static_cast<int64_t>(bytes)}), DType::kU8, nullptr, false);
  }
  t.stage(staging_);
  if (!writer_) writer_ = std::make_unique<detail::BackgroundWriter>();
  InFlight* job = next.get();
  in_flight_ = std::move(next);
  writer_->run([job] {
    job->transaction->write();
    if (job->commit_on_caller) return;
    job->transaction->commit();
    if (job->after_commit) job->after_commit();
  });
}

void AsyncCheckpointer::wait_until_finished() { wait_until_finished(options_.save.timeout); }

void AsyncCheckpointer::wait_until_finished(std::chrono::milliseconds timeout) {
  if (!in_flight_) return;
  InFlight& job = *in_flight_;
  if (!writer_->finished(timeout)) {
    tessel::detail::throw_error(ErrorCode::kDeadlineExceeded, kComponent,
                                "the background save of {} has not finished after {} ms", job.name,
                                timeout.count());
  }
  const std::unique_ptr<InFlight> done = std::move(in_flight_);
  try {
    if (std::exception_ptr failure = writer_->take_failure()) std::rethrow_exception(failure);
    if (job.commit_on_caller) {
      job.transaction->commit();
      if (job.after_commit) job.after_commit();
    }
  } catch (const Error& e) {
    tessel::detail::throw_error(e.code(), kComponent, "the background save of {} failed: {}",
                                job.name, e.message());
  }
}

void AsyncCheckpointer::close() {
  wait_until_finished();
  staging_ = Tensor();
}

bool AsyncCheckpointer::saving() const { return in_flight_ != nullptr; }

int64_t AsyncCheckpointer::staging_bytes_allocated() const {
  return staging_.defined() ? static_cast<int64_t>(staging_.nbytes()) : 0;
}

}  // namespace tessel::checkpoint
