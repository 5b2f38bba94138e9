// The shared-memory segment of one host's processes (comm/mpi/host_shm.h): creation over the MPI
// rendezvous, the futex barrier with deadline and peer watch, the abort flag, the call check.
#include "comm/mpi/host_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>
#include <thread>

#include "comm/mpi/mpi_transport.h"
#include "core/cpu_relax.h"
#include "core/errors.h"
#include "tessel/core/parallel.h"

namespace tessel::detail {
namespace {

constexpr std::string_view kComm = "Communicator";
constexpr uint64_t kMagic = 0x74657373656c5348;  // "tesselSH"
constexpr int kMaxParticipants = 256;
constexpr std::string_view kPrefix = "tessel-shm.";  // /dev/shm/tessel-shm.<pid>.<n>
// How long a waiter sleeps between looks at the abort flag, the peers' processes and the clock.
constexpr auto kTick = std::chrono::milliseconds(2);
// Polls of the generation word before yielding (a few microseconds), and how long a waiter
// keeps polling while yielding the CPU before it sleeps, as the in-process hub does: on a host
// with more participants than cores, the one being waited for gets the core.
constexpr int kSpins = 256;
constexpr auto kYieldTime = std::chrono::microseconds(50);

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

int pidfd_open(int64_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

// Each participant's line: the round it last arrived at.
struct alignas(64) ParticipantControl {
  std::atomic<uint64_t> arrived;  // round + 1 of its last barrier (0: none yet)
};

// A participant's call, as published for the check.
struct alignas(64) CallRecord {
  uint64_t sequence;
  uint64_t hash;
  int64_t count;
  char text[232];
};

struct HostShm::Control {
  uint64_t magic;
  uint32_t participants;
  alignas(64) std::atomic<uint32_t> arrived;     // participants in the current barrier
  alignas(64) std::atomic<uint32_t> generation;  // barriers completed (futex word)
  std::atomic<uint32_t> sleepers;                // waiters inside futex wait
  alignas(64) std::atomic<uint32_t> aborted;     // 0, 1: reason being written, 2: reason valid
  char reason[1024];
  ParticipantControl participant[kMaxParticipants];
  // Each participant's published call, by the parity of the round it was published for: a
  // participant may publish its next call while slower ones still check the current one.
  CallRecord call[2][kMaxParticipants];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "the segment's atomics must be lock-free to work across processes");

void HostShm::remove_stale_segments() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name.substr(0, kPrefix.size()) != kPrefix) continue;
    const long long pid = std::atoll(std::string(name.substr(kPrefix.size())).c_str());
    if (pid > 0 && process_gone(pid)) ::shm_unlink(fmt::format("/{}", name).c_str());
  }
  ::closedir(dir);
}

bool HostShm::enabled() {
  const char* v = std::getenv("TESSEL_SHM");
  return v == nullptr || std::string_view(v) != "0";
}

std::shared_ptr<HostShm> HostShm::create(MpiTransport& mpi,
                                         const std::vector<std::vector<int>>& participants_of,
                                         const std::vector<std::string>& names,
                                         const Signature& signature, Deadline deadline,
                                         std::string* why_not) {
  const auto& peers = mpi.peers();
  const int me = mpi.rank();
  std::map<std::string, std::vector<int>> hosts;  // host -> its processes, ascending
  for (int q = 0; q < mpi.size(); ++q) hosts[peers[q].host].push_back(q);
  bool shared_host = false;
  for (const auto& [host, procs] : hosts) shared_host = shared_host || procs.size() > 1;
  if (!shared_host) {
    *why_not = "no two processes of the group share a host";
    return nullptr;
  }
  // Test seam: TESSEL_SHM_SPLIT_HOSTS=k (on every process) splits each host's processes, in rank
  // order, into k "hosts", so that one machine runs the several-hosts path.
  if (const char* split = std::getenv("TESSEL_SHM_SPLIT_HOSTS");
      split != nullptr && std::atoi(split) > 1) {
    const size_t k = static_cast<size_t>(std::atoi(split));
    std::map<std::string, std::vector<int>> parts;
    for (const auto& [host, procs] : hosts) {
      for (size_t i = 0; i < procs.size(); ++i)
        parts[fmt::format("{}#{}", host, i * k / procs.size())].push_back(procs[i]);
    }
    hosts = std::move(parts);
  }
  std::string my_host;
  for (const auto& [host, procs] : hosts) {
    if (std::find(procs.begin(), procs.end(), me) != procs.end()) my_host = host;
  }
  std::shared_ptr<HostShm> shm(new HostShm());
  const std::vector<int>& mine = hosts[my_host];
  // A host's leader: the process of its lowest group rank (its participant 0).
  for (const auto& [host, procs] : hosts) {
    int leader = procs[0];
    for (int q : procs) {
      if (participants_of[q][0] < participants_of[leader][0]) leader = q;
    }
    shm->host_leaders_.push_back(leader);
    if (host == my_host) shm->my_host_leader_ = leader;
  }
  std::sort(shm->host_leaders_.begin(), shm->host_leaders_.end());
  shm->multi_host_ = hosts.size() > 1;
  for (int q : mine) {
    for (int r : participants_of[q]) shm->participants_.push_back({r, names[r], q, peers[q].pid});
    if (q != me) shm->watched_.push_back({q, peers[q].pid, pidfd_open(peers[q].pid)});
  }
  std::sort(shm->participants_.begin(), shm->participants_.end(),
            [](const HostParticipant& x, const HostParticipant& y) { return x.rank < y.rank; });
  const int H = shm->size();
  shm->rounds_.assign(static_cast<size_t>(H), 0);
  shm->first_local_ = shm->index_of_rank(participants_of[me][0]);
  // More participants than cores: a waiter polls without pausing the core for the one it waits
  // for, which may be descheduled on it; it yields at once.
  shm->spins_ = H > machine_cores() ? 0 : kSpins;
  shm->poll_mpi_ = [&mpi] { mpi.poll_aborts(); };
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  shm->data_offset_ = (sizeof(Control) + page - 1) / page * page;
  if (const char* v = std::getenv("TESSEL_SHM_SLOT_BYTES"); v != nullptr && std::atoll(v) >= 4096) {
    shm->slot_bytes_ = static_cast<size_t>(std::atoll(v)) / 64 * 64;
  }
  shm->bytes_ = shm->data_offset_ + (2 * static_cast<size_t>(H) + 2) * shm->slot_bytes_;

  // 1. The host's first process creates the segment (alone on its host: private memory). The
  // name is unlinked and the descriptor closed however this ends (an MPI deadline included).
  std::string status = "1";
  struct Cleanup {
    int fd = -1;
    std::string name;
    ~Cleanup() {
      if (fd >= 0) ::close(fd);
      if (!name.empty()) ::shm_unlink(name.c_str());
    }
  } cleanup;
  int& fd = cleanup.fd;
  std::string& segment_name = cleanup.name;
  const bool creator = me == mine[0];
  if (H > kMaxParticipants) {
    status = fmt::format("0{} participants on host {} (at most {})", H, my_host, kMaxParticipants);
  } else if (mine.size() == 1) {
    void* p =
        ::mmap(nullptr, shm->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      status = fmt::format("0mmap of {} bytes: {}", shm->bytes_, std::strerror(errno));
    } else {
      shm->base_ = static_cast<unsigned char*>(p);
    }
  } else if (creator) {
    remove_stale_segments();
    static std::atomic<int> counter{0};
    segment_name = fmt::format("/{}{}.{}", kPrefix, ::getpid(), counter++);
    fd = ::shm_open(segment_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(shm->bytes_)) != 0) {
      status = fmt::format("0creating {} ({} bytes): {}", segment_name, shm->bytes_,
                           std::strerror(errno));
    } else {
      status = "1" + segment_name;
    }
  }
  // A process lost during the set-up may be the creator, killed before it unlinked the name: a
  // survivor that gives up removes the segments of processes that are gone.
  const auto exchange = [&] {
    try {
      return mpi.exchange_records(signature, Post{}, status, deadline);
    } catch (...) {
      remove_stale_segments();
      throw;
    }
  };
  auto records = exchange();
  // 2. The others map it; everyone says whether that worked.
  std::string mapped_name;  // the creator's segment, as another process opened it
  if (status[0] == '1' && mine.size() > 1) {
    const std::string& created = records[static_cast<size_t>(mine[0])].payload;
    if (created.empty() || created[0] != '1') {
      status = "0the segment's creator failed";
    } else {
      if (!creator) {
        mapped_name = created.substr(1);
        fd = ::shm_open(mapped_name.c_str(), O_RDWR, 0600);
      }
      struct stat st {};
      void* p = MAP_FAILED;
      if (fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == shm->bytes_) {
        p = ::mmap(nullptr, shm->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      }
      if (p == MAP_FAILED) {
        status = fmt::format("0mapping {}: {}", created.substr(1), std::strerror(errno));
      } else {
        shm->base_ = static_cast<unsigned char*>(p);
        status = "1";
      }
    }
  }
  records = exchange();
  // 3. Everyone has mapped it (or given up): the name goes. Every process unlinks it (the others'
  // calls find it gone), so that a creator killed right here leaves nothing behind.
  if (!segment_name.empty()) ::shm_unlink(segment_name.c_str());
  if (!mapped_name.empty()) ::shm_unlink(mapped_name.c_str());
  segment_name.clear();
  for (int q = 0; q < mpi.size(); ++q) {
    const std::string& s = records[static_cast<size_t>(q)].payload;
    if (s.empty() || s[0] != '1') {
      *why_not = fmt::format("process {}: {}", q, s.empty() ? "no status" : s.substr(1));
      return nullptr;  // the destructor unmaps
    }
  }
  if (creator || mine.size() == 1) {
    shm->control()->magic = kMagic;
    shm->control()->participants = static_cast<uint32_t>(H);
  }
  return shm;
}

HostShm::~HostShm() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  for (const Watched& w : watched_) {
    if (w.fd >= 0) ::close(w.fd);
  }
}

int HostShm::index_of_rank(int rank) const {
  for (int i = 0; i < size(); ++i) {
    if (participants_[static_cast<size_t>(i)].rank == rank) return i;
  }
  return -1;
}

unsigned char* HostShm::slot(int bank, int participant) const {
  return base_ + data_offset_ +
         (static_cast<size_t>(bank) * static_cast<size_t>(size()) +
          static_cast<size_t>(participant)) *
             slot_bytes_;
}

unsigned char* HostShm::result(int bank) const {
  return base_ + data_offset_ +
         (2 * static_cast<size_t>(size()) + static_cast<size_t>(bank)) * slot_bytes_;
}

void HostShm::publish_call(int me, uint64_t round, const Signature& signature, int64_t count) {
  CallRecord& p = control()->call[round & 1][me];
  p.sequence = signature.sequence;
  p.hash = std::hash<std::string>()(signature.agreed);
  p.count = count;
  const size_t n = std::min(signature.text.size(), sizeof p.text - 1);
  std::memcpy(p.text, signature.text.data(), n);
  p.text[n] = '\0';
}

void HostShm::check_calls(int me, uint64_t round, const Signature& signature) {
  const CallRecord& mine = control()->call[round & 1][me];
  for (int i = 0; i < size(); ++i) {
    const CallRecord& p = control()->call[round & 1][i];
    if (p.sequence == mine.sequence && p.hash == mine.hash && p.count == mine.count) continue;
    const HostParticipant& x = participants_[static_cast<size_t>(me)];
    const HostParticipant& y = participants_[static_cast<size_t>(i)];
    const std::string reason = fmt::format(
        "mismatched collectives in shared memory: rank {} ({}) called {} (sequence {}) but rank {} "
        "({}) called {} (sequence {})",
        x.rank, x.name, signature.text, mine.sequence, y.rank, y.name, p.text, p.sequence);
    abort(reason);
    throw_error(ErrorCode::kFailedPrecondition, kComm, "{}", reason);
  }
}

void HostShm::abort(const std::string& reason) {
  Control* c = control();
  uint32_t expected = 0;
  if (c->aborted.compare_exchange_strong(expected, 1)) {
    const size_t n = std::min(reason.size(), sizeof c->reason - 1);
    std::memcpy(c->reason, reason.data(), n);
    c->reason[n] = '\0';
    c->aborted.store(2);
  }
  c->generation.fetch_add(0);  // orders the flag before the wake
  futex(&c->generation, FUTEX_WAKE, INT_MAX, nullptr);
}

void HostShm::check_alive(int me, const Signature& signature) {
  Control* c = control();
  if (uint32_t state = c->aborted.load(std::memory_order_acquire); state != 0) {
    while (state == 1) {  // the reason is being written
      std::this_thread::yield();
      state = c->aborted.load(std::memory_order_acquire);
    }
    throw_error(ErrorCode::kAborted, kComm, "{}", c->reason);
  }
  for (const Watched& w : watched_) {
    bool gone = false;
    if (w.fd >= 0) {
      pollfd p{w.fd, POLLIN, 0};
      gone = ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
    } else {
      gone = process_gone(w.pid);
    }
    if (!gone) continue;
    std::vector<std::string> lost;
    for (const HostParticipant& p : participants_) {
      if (p.process == w.process) lost.push_back(fmt::format("rank {} ({})", p.rank, p.name));
    }
    const HostParticipant& x = participants_[static_cast<size_t>(me)];
    const std::string reason = fmt::format(
        "rank {} ({}) lost {}: the process of MPI rank {} (pid {}) is no longer running; waited "
        "in the shared-memory barrier of {} (sequence {})",
        x.rank, x.name, fmt::join(lost, ", "), w.process, w.pid, signature.text,
        signature.sequence);
    abort(reason);
    throw_error(ErrorCode::kAborted, kComm, "{}", reason);
  }
}

void HostShm::barrier(int me, uint64_t round, const Signature& signature, Deadline deadline) {
  Control* c = control();
  const uint32_t generation = c->generation.load(std::memory_order_acquire);
  if (c->aborted.load(std::memory_order_acquire) != 0) check_alive(me, signature);
  c->participant[me].arrived.store(round + 1, std::memory_order_release);
  if (c->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size())) {
    c->arrived.store(0, std::memory_order_relaxed);
    c->generation.fetch_add(1, std::memory_order_seq_cst);
    if (c->sleepers.load(std::memory_order_seq_cst) > 0)
      futex(&c->generation, FUTEX_WAKE, INT_MAX, nullptr);
    return;
  }
  for (int i = 0; i < spins_; ++i) {
    if (c->generation.load(std::memory_order_acquire) != generation) return;
    cpu_relax();
  }
  const auto yield_until = std::min(deadline, Clock::now() + kYieldTime);
  while (Clock::now() < yield_until) {
    if (c->generation.load(std::memory_order_acquire) != generation) return;
    std::this_thread::yield();
  }
  for (;;) {
    if (c->generation.load(std::memory_order_acquire) != generation) return;
    check_alive(me, signature);
    if (me == first_local_) poll_mpi_();
    const auto now = Clock::now();
    if (now >= deadline) {
      std::vector<std::string> late;
      for (int i = 0; i < size(); ++i) {
        if (c->participant[i].arrived.load() < round + 1) {
          const HostParticipant& p = participants_[static_cast<size_t>(i)];
          late.push_back(fmt::format("rank {} ({}, pid {})", p.rank, p.name, p.pid));
        }
      }
      const HostParticipant& x = participants_[static_cast<size_t>(me)];
      throw_error(ErrorCode::kDeadlineExceeded, kComm,
                  "rank {} ({}) waited past the deadline in the shared-memory barrier of {} "
                  "(sequence {}) for {}",
                  x.rank, x.name, signature.text, signature.sequence, fmt::join(late, ", "));
    }
    const auto wait = std::min<Clock::duration>(kTick, deadline - now);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    c->sleepers.fetch_add(1, std::memory_order_seq_cst);
    futex(&c->generation, FUTEX_WAIT, generation, &ts);
    c->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace tessel::detail
