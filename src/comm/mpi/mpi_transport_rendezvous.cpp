// The MpiTransport's rendezvous (comm/mpi/mpi_transport.h): every rank sends every other its
// exchange record (signature, post, payload) under mpi_tags::kExchange and waits for theirs;
// exchange, exchange_records, barrier and share are a rendezvous plus the signature check.
#include <cstring>
#include <functional>

#include "comm/mpi/mpi_transport.h"
#include "core/errors.h"

namespace tessel::detail {
namespace {

// Longest signature text an exchange record carries (the agreed part is never cut).
constexpr size_t kMaxText = 4096;

// Exchange record: fixed header, then the agreed signature, this rank's text and the payload.
struct RecordHeader {
  uint64_t incarnation;
  uint64_t sequence;
  uint64_t hash;
  int64_t count;
  int64_t aux;
  uint32_t agreed_bytes;
  uint32_t text_bytes;
  uint32_t payload_bytes;
};

std::vector<uint8_t> encode(const Signature& s, const Post& p, const std::string& payload,
                            uint64_t incarnation) {
  const std::string_view text = std::string_view(s.text).substr(0, kMaxText);
  RecordHeader h{incarnation, s.sequence, std::hash<std::string>()(s.agreed), p.count, p.aux,
                 static_cast<uint32_t>(s.agreed.size()), static_cast<uint32_t>(text.size()),
                 static_cast<uint32_t>(payload.size())};
  std::vector<uint8_t> out(sizeof h + s.agreed.size() + text.size() + payload.size());
  uint8_t* at = out.data();
  std::memcpy(at, &h, sizeof h);
  std::memcpy(at += sizeof h, s.agreed.data(), s.agreed.size());
  std::memcpy(at += s.agreed.size(), text.data(), text.size());
  std::memcpy(at += text.size(), payload.data(), payload.size());
  return out;
}

MpiTransport::Record decode(const std::vector<uint8_t>& bytes, int from,
                            std::string_view component) {
  RecordHeader h;
  if (bytes.size() < sizeof h) {
    throw_error(ErrorCode::kInternal, component,
                "malformed exchange record from rank {} ({} bytes)", from, bytes.size());
  }
  std::memcpy(&h, bytes.data(), sizeof h);
  if (bytes.size() != sizeof h + h.agreed_bytes + h.text_bytes + h.payload_bytes) {
    throw_error(ErrorCode::kInternal, component,
                "malformed exchange record from rank {} ({} bytes)", from, bytes.size());
  }
  MpiTransport::Record r{h.sequence, h.hash, h.count, h.aux, {}, {}, {}, h.incarnation};
  const char* p = reinterpret_cast<const char*>(bytes.data()) + sizeof h;
  r.agreed.assign(p, h.agreed_bytes);
  r.text.assign(p + h.agreed_bytes, h.text_bytes);
  r.payload.assign(p + h.agreed_bytes + h.text_bytes, h.payload_bytes);
  return r;
}

}  // namespace

std::vector<MpiTransport::Record> MpiTransport::rendezvous(const Signature& signature,
                                                           const Post& mine, Deadline deadline,
                                                           const std::string& payload) {
  std::vector<Record> records(static_cast<size_t>(size_));
  std::vector<bool> have(static_cast<size_t>(size_), false);
  have[rank_] = true;
  int missing = size_ - 1;
  // The first rank whose record has not arrived, for the watchdog (watch_stuck), which watches
  // the whole rendezvous: the sends of this rank's record are MPI calls too.
  const auto first_missing = [&] {
    for (int p = 0; p < size_; ++p) {
      if (!have[p]) return p;
    }
    return -1;
  };
  std::atomic<int> waiting_for{first_missing()};
  const auto watch = watch_stuck(signature, deadline, &waiting_for);
  if (!constructing_) poll_aborts();
  const std::vector<uint8_t> record = encode(signature, mine, payload, incarnation_);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) post_send(p, mpi_tags::kExchange, record.data(), record.size());
  }
  std::vector<uint8_t> bytes;
  auto poll = [&] {
    for (int p = 0; p < size_ && missing > 0; ++p) {
      while (!have[p]) {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        int rc = MPI_SUCCESS;
        const char* call = "MPI_Improbe";
        {
          MpiCallLock lock;
          rc = MPI_Improbe(p, mpi_tags::kExchange, comm_, &flag, &message, &status);
          if (rc == MPI_SUCCESS && !flag) break;
          if (rc == MPI_SUCCESS) {
            int count = 0;
            MPI_Get_count(&status, MPI_BYTE, &count);
            bytes.resize(static_cast<size_t>(count));
            call = "MPI_Mrecv";
            rc = MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
          }
        }
        if (rc != MPI_SUCCESS) lost_peer(p, call, rc);
        Record r = decode(bytes, p, kComponent);
        // A record of an older group that had this communicator's context id: dropped.
        const bool ours = constructing_ ? r.sequence == signature.sequence && r.agreed == signature.agreed
                                        : r.incarnation == incarnation_;
        if (!ours) continue;
        records[p] = std::move(r);
        have[p] = true;
        --missing;
        waiting_for.store(first_missing(), std::memory_order_relaxed);
      }
    }
    return missing == 0;
  };
  auto on_deadline = [&](double waited) {
    std::vector<std::string> late;
    for (int p = 0; p < size_; ++p) {
      if (!have[p]) late.push_back(who(p).substr(5));  // "r (name)"
    }
    const std::string message = fmt::format(
        "{} waited {:.3f} s for ranks [{}] in {} (sequence {}); they did not arrive", who(rank_),
        waited, fmt::join(late, ", "), signature.describe(members_), signature.sequence);
    abort_group(message, /*tell_peers=*/true);
    throw Error(ErrorCode::kDeadlineExceeded, kComponent, message);
  };
  wait(poll, signature, deadline, on_deadline);

  records[rank_] = Record{signature.sequence, std::hash<std::string>()(signature.agreed), mine.count,
                          mine.aux, signature.agreed, signature.text.substr(0, kMaxText), payload,
                          incarnation_};
  return records;
}

std::vector<Post> MpiTransport::exchange(const Signature& signature, const Post& mine,
                                         Deadline deadline) {
  const std::vector<Record> records = rendezvous(signature, mine, deadline);
  check_signatures(records);
  std::vector<Post> posts(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    posts[p].count = records[p].count;
    posts[p].aux = records[p].aux;
  }
  posts[rank_] = mine;
  return posts;
}

std::vector<MpiTransport::Record> MpiTransport::exchange_records(const Signature& signature,
                                                                 const Post& mine,
                                                                 const std::string& payload,
                                                                 Deadline deadline) {
  std::vector<Record> records = rendezvous(signature, mine, deadline, payload);
  check_signatures(records);
  return records;
}

void MpiTransport::check_signatures(const std::vector<Record>& records) {
  const Record& first = records[0];
  for (int r = 1; r < size_; ++r) {
    const Record& other = records[r];
    if (other.hash == first.hash && other.agreed == first.agreed && other.sequence == first.sequence) {
      continue;
    }
    const std::string message = fmt::format(
        "collectives differ: rank 0 ({}) called {} over group [{}] (sequence {}) but rank {} ({}) "
        "called {} over group [{}] (sequence {})",
        members_[0], first.text, fmt::join(members_, ", "), first.sequence, r, members_[r],
        other.text, fmt::join(members_, ", "), other.sequence);
    // Every rank sees the same records and fails the same way: nobody needs telling.
    abort_group(message, /*tell_peers=*/false);
    throw Error(ErrorCode::kFailedPrecondition, kComponent, message);
  }
}

std::vector<Post> MpiTransport::share(const Signature& signature, const Post& mine,
                                      Deadline deadline) {
  exchange(signature, mine, deadline);
  unsupported_ = true;
  throw_error(ErrorCode::kUnimplemented, kComponent,
              "{} reads peers' buffers directly (the in-process algorithms, e.g. Algorithm::kDirect); "
              "ranks in different processes share no memory",
              signature.text);
}

void MpiTransport::barrier(const Signature& signature, Deadline deadline) {
  exchange(signature, Post{}, deadline);
}

}  // namespace tessel::detail
