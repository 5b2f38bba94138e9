// ProcessAgreement: the processes of one save agree after each step of the protocol whether
// every one of them succeeded, so that none waits for a process that failed and none commits a
// checkpoint another process did not finish writing.
//
// run_step(step, work) runs `work` on this process, then an all-reduce (min) of one value per
// device over the agreement mesh: each device contributes "ok" or its process's index. A process
// whose work threw rethrows its own error; the others throw kAborted naming the first failed
// process and the step. The collective is bounded by the timeout (kDeadlineExceeded). With a
// mesh of one process (every device local, or none), nothing is exchanged.
#pragma once

#include <chrono>
#include <functional>
#include <string_view>

#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel::checkpoint::detail {

class ProcessAgreement {
 public:
  ProcessAgreement(Mesh mesh, Runtime* runtime, int process, std::chrono::milliseconds timeout);
  void run_step(std::string_view step, const std::function<void()>& work);

 private:
  // The lowest index of a failed process, or -1 when every process's `ok` was true.
  int first_failed(bool ok);

  Mesh mesh_;
  Runtime* runtime_;
  int process_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tessel::checkpoint::detail
