// SystemChannel: how the hosts of a multi-host system talk to its coordinator (task 0).
//
// The system lifecycle (system.h) sends few, small messages: each host reports to the
// coordinator (its device count at disconnect_host, its global device ids at initialize_host),
// and the coordinator answers each host (its configuration, then the topology, or the error
// that stopped the start). A SystemChannel carries them as opaque bytes (serialized protos of
// proto/system.proto), so that any transport can implement it: in-process queues here
// (make_in_process_system_channel), MPI point-to-point between the processes of an MPI job
// (make_mpi_system_channel, mpi_system_channel.h).
//
//   auto channel = make_in_process_system_channel(2);
//   channel->send_to_coordinator(1, bytes);
//   std::optional<SystemChannel::Envelope> m = channel->receive_at_coordinator(deadline);
//   m->task == 1; m->message == bytes
//
// Contract for implementations:
//   - Tasks are 0..num_hosts()-1; the coordinator runs on task 0, which is also a host. A task
//     outside that range: kInvalidArgument.
//   - Sends queue the message and return without waiting for the receiver. Messages from one
//     sender to one receiver arrive in the order they were sent; nothing is dropped while the
//     channel lives.
//   - Receives return the oldest queued message, or nullopt once `deadline` passes with none
//     (a deadline already past: only what has already arrived). They never wait longer, and a
//     receive that returns nullopt consumes nothing.
//   - One coordinator (one caller of receive_at_coordinator) and one receiver per host task.
//   - A transport failure (a peer that cannot be reached) is kUnavailable or kAborted.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace tessel {

class SystemChannel {
 public:
  using Clock = std::chrono::steady_clock;
  using Deadline = Clock::time_point;

  // A message received by the coordinator, with the task that sent it.
  struct Envelope {
    int task = 0;
    std::string message;
  };

  virtual ~SystemChannel() = default;

  // The number of hosts; >= 1.
  virtual int num_hosts() const = 0;

  // Host `task` -> the coordinator.
  virtual void send_to_coordinator(int task, std::string message) = 0;
  // At the coordinator: the oldest message from any host, or nullopt at `deadline`.
  virtual std::optional<Envelope> receive_at_coordinator(Deadline deadline) = 0;

  // The coordinator -> host `task`.
  virtual void send_to_host(int task, std::string message) = 0;
  // At host `task`: the oldest message from the coordinator, or nullopt at `deadline`.
  virtual std::optional<std::string> receive_at_host(int task, Deadline deadline) = 0;
};

// Queues in this process for num_hosts hosts (simulated hosts: one Runtime each).
// num_hosts < 1: kInvalidArgument.
std::shared_ptr<SystemChannel> make_in_process_system_channel(int num_hosts);

}  // namespace tessel
