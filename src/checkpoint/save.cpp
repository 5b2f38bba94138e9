// save(): the three phases of a SaveTransaction in a row, on the caller's thread.
#include "checkpoint/save_transaction.h"
#include "tessel/checkpoint/checkpoint.h"

namespace tessel::checkpoint {

void save(const std::string& directory, const State& state, const SaveOptions& options) {
  detail::SaveTransaction transaction(directory, state, options);
  transaction.write();
  transaction.commit();
}

}  // namespace tessel::checkpoint
