// Internal: the minimal transport every collective algorithm is written against.
//
// A Transport is one rank's endpoint of a group. It offers a rendezvous (`exchange`: every rank
// posts a small record and receives everyone's, after the ranks' signatures are compared), a
// barrier, and buffered point-to-point send/recv. In-process transports also share memory, so
// algorithms may dereference the pointers in other ranks' posts (shares_memory()).
// Every wait takes a deadline; an aborted group makes every wait throw kAborted.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel::detail {

class DeviceCollectives;  // device_collectives.h

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// What one rank contributes to a rendezvous; the meaning of the fields is the collective's.
struct Post {
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  int64_t aux = 0;
  const int64_t* counts = nullptr;  // per-rank counts (all_to_all), valid until the next phase
};

// Identifies one collective call. `agreed` must be equal on every rank (op, dtype, shape parts
// that must match, root, reduce op); `text` describes this rank's call for error messages.
struct Signature {
  uint64_t sequence = 0;
  std::string agreed;
  std::string text;

  // "<text> over group [<members>]", for error messages: built only when one is needed, so that
  // the hot path formats no group list.
  std::string describe(const std::vector<std::string>& members) const {
    return fmt::format("{} over group [{}]", text, fmt::join(members, ", "));
  }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::vector<std::string>& members() const = 0;
  // True when the pointers in other ranks' posts may be read and written directly.
  virtual bool shares_memory() const = 0;

  // Posts `mine` and returns every rank's post in rank order. Throws kFailedPrecondition when
  // the ranks' signatures differ, kDeadlineExceeded naming the missing ranks, kAborted.
  virtual std::vector<Post> exchange(const Signature& signature, const Post& mine,
                                     Deadline deadline) = 0;
  // exchange whose posted buffers the other ranks read or write until the next barrier. If this
  // rank then leaves the collective early (fail), it first waits until no peer can still be
  // touching them, so that its caller may free them.
  virtual std::vector<Post> share(const Signature& signature, const Post& mine, Deadline deadline) {
    return exchange(signature, mine, deadline);
  }
  // exchange without data.
  virtual void barrier(const Signature& signature, Deadline deadline) = 0;
  // Buffered: returns once the bytes are copied out of `data`.
  virtual void send(int peer, int tag, const void* data, size_t bytes,
                    const Signature& signature, Deadline deadline) = 0;
  // Waits for the next message from `peer` under `tag`; its size must equal `bytes`.
  virtual void recv(int peer, int tag, void* data, size_t bytes, const Signature& signature,
                    Deadline deadline) = 0;

  // Every current and later wait of every rank throws kAborted carrying `reason`.
  virtual void abort(const std::string& reason) = 0;
  // This rank leaves its current collective because of an error: aborts the group (the first
  // reason wins) and returns once no other rank can still touch the buffers it shared.
  virtual void fail(const std::string& reason) { abort(reason); }

  // Memory kept between calls for algorithms whose posted buffers must outlive the call that
  // posted them (direct_all_reduce's one-rendezvous path for small buffers): peers may still be
  // reading a rank's staged copy after that rank has returned. Two banks, used alternately by
  // such calls (`uses` counts them). Only this rank's thread writes it; other ranks only read
  // the copies posted to them. In-process endpoints keep it in the group's shared hub, so that it
  // outlives an endpoint destroyed while peers still read from it; the default is this object.
  struct Staging {
    std::vector<unsigned char> bank[2];
    uint64_t uses = 0;
  };
  virtual Staging& staging() { return staging_; }

  // Collectives over device memory (device_collectives.h); null for host-only transports.
  virtual DeviceCollectives* device_collectives() { return nullptr; }

 private:
  Staging staging_;
};

}  // namespace tessel::detail
