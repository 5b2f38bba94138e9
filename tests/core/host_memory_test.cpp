// The process's host memory limit (host_memory.h), the probe of available memory, the byte-count
// text helpers and TrackingAllocator's own limit.
#include "tessel/core/host_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/byte_size.h"
#include "core/host_allocator.h"
#include "core/host_memory_probe.h"
#include "tessel/core/tensor.h"
#include "testing/expect_error.h"
#include "testing/scoped_env.h"

namespace tessel {
namespace {

using testing::ScopedEnv;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// Sets the host limit for one test and restores the one before.
class ScopedHostLimit {
 public:
  explicit ScopedHostLimit(int64_t bytes) : old_(host_memory_limit()) {
    set_host_memory_limit(bytes);
  }
  ~ScopedHostLimit() { set_host_memory_limit(old_); }

 private:
  int64_t old_;
};

TEST(HostMemory, LimitRefuses100MiBButAccepts32MiB) {
  // 64 MiB on top of what this process holds already.
  const int64_t bytes = host_memory_stats().live_bytes + 64 * kMiB;
  ScopedHostLimit limit(bytes);
  EXPECT_EQ(host_memory_stats().limit_bytes, bytes);
  const MemoryStats before = host_memory_stats();
  EXPECT_TESSEL_ERROR(Tensor::zeros(Shape{25 * kMiB}, DType::kF32), ErrorCode::kResourceExhausted,
                      "Tensor: cannot allocate 104857600 bytes for [26214400] f32: Allocator: "
                      "host: allocating 100.0 MiB (104857600 bytes) would exceed the process's "
                      "host memory limit " +
                          detail::format_bytes(bytes));
  const MemoryStats after = host_memory_stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);  // nothing kept from the refused request
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  EXPECT_EQ(after.peak_bytes, before.peak_bytes);

  Tensor fits = Tensor::zeros(Shape{8 * kMiB}, DType::kF32);  // 32 MiB
  EXPECT_EQ(host_memory_stats().live_bytes, before.live_bytes + 32 * kMiB);
  EXPECT_EQ(fits.at({8 * kMiB - 1}), 0.0);
  fits = Tensor();
  EXPECT_EQ(host_memory_stats().live_bytes, before.live_bytes);
}

TEST(HostMemory, RefusalNamesTheBytesInUseAndHowToSetTheLimit) {
  ScopedHostLimit limit(host_memory_stats().live_bytes + 48 * kMiB);
  Tensor held = Tensor::zeros(Shape{32 * kMiB}, DType::kU8);
  EXPECT_TESSEL_ERROR(Tensor::zeros(Shape{32 * kMiB}, DType::kU8), ErrorCode::kResourceExhausted,
                      "(in use " + detail::format_bytes(host_memory_stats().live_bytes) +
                          "); set it with set_host_memory_limit, TESSEL_HOST_MEMORY_LIMIT");
}

TEST(HostMemory, TheCacheIsTrimmedBeforeARefusal) {
  ScopedHostLimit limit(host_memory_stats().live_bytes + 64 * kMiB);
  { Tensor freed = Tensor::zeros(Shape{40 * kMiB}, DType::kU8); }  // its block goes to the cache
  const int64_t cached = host_memory_stats().cached_bytes;
  if (cached < 40 * kMiB) GTEST_SKIP() << "the host cache is off (TESSEL_HOST_CACHE_BYTES)";
  // 40 MiB cached + 48 MiB new exceed the limit; the cache is given back and the request fits.
  Tensor t = Tensor::zeros(Shape{48 * kMiB}, DType::kU8);
  EXPECT_EQ(t.nbytes(), static_cast<size_t>(48 * kMiB));
  EXPECT_LT(host_memory_stats().cached_bytes, cached);
}

TEST(HostMemory, ARequestAboveWhatTheHostCanHoldFailsCleanly) {
  // The default limit is below the available memory; a request above both (20 GiB on a 23 GiB
  // machine) is refused without touching the system, whatever this machine has.
  const int64_t request = std::max(host_available_memory(), host_memory_limit()) + kGiB;
  const MemoryStats before = host_memory_stats();
  EXPECT_TESSEL_ERROR(
      Tensor::zeros(Shape{request}, DType::kU8), ErrorCode::kResourceExhausted,
      "would exceed the process's host memory limit " + detail::format_bytes(host_memory_limit()));
  EXPECT_EQ(host_memory_stats().live_bytes, before.live_bytes);
}

TEST(HostMemory, LimitMustBePositive) {
  EXPECT_TESSEL_ERROR(set_host_memory_limit(0), ErrorCode::kInvalidArgument,
                      "host memory limit must be at least 1 byte, got 0");
  EXPECT_TESSEL_ERROR(set_host_memory_limit(-5), ErrorCode::kInvalidArgument, "got -5");
}

TEST(HostMemory, PeakAndReset) {
  reset_host_peak_memory();
  const int64_t base = host_memory_stats().live_bytes;
  EXPECT_EQ(host_memory_stats().peak_bytes, base);
  { Tensor t = Tensor::zeros(Shape{1000}, DType::kF32); }  // 4000 bytes
  EXPECT_EQ(host_memory_stats().peak_bytes, base + 4032);  // rounded up to 64-byte lines
  reset_host_peak_memory();
  EXPECT_EQ(host_memory_stats().peak_bytes, base);
}

TEST(HostMemory, DefaultLimitIsAFractionOfTheAvailableMemory) {
  ScopedEnv limit("TESSEL_HOST_MEMORY_LIMIT", std::nullopt);
  ScopedEnv fraction("TESSEL_PER_PROCESS_MEMORY_FRACTION", std::nullopt);
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_SIZE", std::nullopt);
  ScopedEnv mpich("MPI_LOCALNRANKS", std::nullopt);
  const auto available = static_cast<double>(host_available_memory());
  ASSERT_GT(available, 0);
  // The available memory moves between the two reads: allow 10% of it.
  EXPECT_NEAR(static_cast<double>(detail::default_host_memory_limit()),
              kDefaultPerProcessMemoryFraction * available, 0.1 * available);
  {
    ScopedEnv half("TESSEL_PER_PROCESS_MEMORY_FRACTION", "0.5");
    EXPECT_NEAR(static_cast<double>(detail::default_host_memory_limit()), 0.5 * available,
                0.1 * available);
  }
  {
    ScopedEnv four("OMPI_COMM_WORLD_LOCAL_SIZE", "4");  // four processes share this host
    EXPECT_NEAR(static_cast<double>(detail::default_host_memory_limit()),
                kDefaultPerProcessMemoryFraction * available / 4, 0.1 * available / 4);
  }
}

// The host allocator's block cache size: a byte count with the same grammar as the limits; a
// malformed value is an error naming it (it used to be ignored silently).
TEST(HostMemory, HostCacheBytesIsAByteCountOrAnError) {
  {
    ScopedEnv cache("TESSEL_HOST_CACHE_BYTES", "64M");
    EXPECT_NO_THROW(detail::HostAllocator(int64_t{1} << 30));
  }
  {
    ScopedEnv cache("TESSEL_HOST_CACHE_BYTES", "0");  // 0 turns the cache off
    EXPECT_NO_THROW(detail::HostAllocator(int64_t{1} << 30));
  }
  ScopedEnv cache("TESSEL_HOST_CACHE_BYTES", "-1");
  EXPECT_TESSEL_ERROR(detail::HostAllocator(int64_t{1} << 30), ErrorCode::kInvalidArgument,
                      "Allocator: TESSEL_HOST_CACHE_BYTES='-1' is not a byte count of at least 0");
}

TEST(HostMemory, EnvironmentOverridesTheDefault) {
  {
    ScopedEnv limit("TESSEL_HOST_MEMORY_LIMIT", "512MiB");
    EXPECT_EQ(detail::default_host_memory_limit(), 512 * kMiB);
  }
  {
    ScopedEnv limit("TESSEL_HOST_MEMORY_LIMIT", "lots");
    EXPECT_TESSEL_ERROR(detail::default_host_memory_limit(), ErrorCode::kInvalidArgument,
                        "TESSEL_HOST_MEMORY_LIMIT='lots' is not a byte count");
  }
  for (const char* bad : {"0", "1.5", "-0.25", "half"}) {
    ScopedEnv limit("TESSEL_HOST_MEMORY_LIMIT", std::nullopt);
    ScopedEnv fraction("TESSEL_PER_PROCESS_MEMORY_FRACTION", bad);
    EXPECT_TESSEL_ERROR(detail::default_host_memory_limit(), ErrorCode::kInvalidArgument,
                        std::string("TESSEL_PER_PROCESS_MEMORY_FRACTION='") + bad +
                            "' is not a fraction in (0, 1]");
  }
}

// A fake /proc and /sys/fs/cgroup in a temporary directory.
class FakeHost {
 public:
  FakeHost()
      : root_(std::filesystem::temp_directory_path() /
              ("tessel_fake_host_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~FakeHost() { std::filesystem::remove_all(root_); }

  void write(const std::string& path, const std::string& text) {
    const std::filesystem::path full = root_ / path;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full) << text;
  }
  detail::HostMemoryFiles files() const {
    return {(root_ / "meminfo").string(), (root_ / "self_cgroup").string(),
            (root_ / "cgroup").string()};
  }

 private:
  std::filesystem::path root_;
};

TEST(HostMemoryProbe, MemAvailableWithoutACgroupLimit) {
  FakeHost host;
  host.write("meminfo", "MemTotal: 24684084 kB\nMemFree: 1000 kB\nMemAvailable: 23832092 kB\n");
  host.write("self_cgroup", "0::/\n");
  host.write("cgroup/memory.max", "max\n");
  EXPECT_EQ(detail::available_memory(host.files()), int64_t{23832092} * 1024);
}

TEST(HostMemoryProbe, CgroupV2HeadroomOfTheTightestAncestor) {
  FakeHost host;
  host.write("meminfo", "MemAvailable: 23832092 kB\n");
  host.write("self_cgroup", "0::/jobs/mine\n");
  host.write("cgroup/jobs/mine/memory.max", "max\n");
  host.write("cgroup/jobs/memory.max", std::to_string(8 * kGiB) + "\n");
  host.write("cgroup/jobs/memory.current", std::to_string(3 * kGiB) + "\n");
  EXPECT_EQ(detail::available_memory(host.files()), 5 * kGiB);
}

TEST(HostMemoryProbe, CgroupV1MemoryController) {
  FakeHost host;
  host.write("meminfo", "MemAvailable: 23832092 kB\n");
  host.write("self_cgroup", "5:cpu,cpuacct:/\n4:memory:/box\n0::/\n");
  host.write("cgroup/memory/box/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  host.write("cgroup/memory/box/memory.usage_in_bytes", std::to_string(kGiB / 2) + "\n");
  host.write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // no limit
  EXPECT_EQ(detail::available_memory(host.files()), 3 * kGiB / 2);
}

TEST(HostMemoryProbe, NothingReadableIsUnknown) {
  FakeHost host;
  EXPECT_EQ(detail::available_memory(host.files()), -1);
}

TEST(ByteSize, FormatAndParse) {
  EXPECT_EQ(detail::format_bytes(0), "0 B");
  EXPECT_EQ(detail::format_bytes(1023), "1023 B");
  EXPECT_EQ(detail::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(detail::format_bytes(20 * kGiB), "20.0 GiB");
  EXPECT_EQ(detail::format_request_bytes(1000), "1000 B");
  EXPECT_EQ(detail::format_request_bytes(1536), "1.5 KiB (1536 bytes)");
  EXPECT_EQ(detail::parse_byte_size("4096"), 4096);
  EXPECT_EQ(detail::parse_byte_size("64M"), 64 * kMiB);
  EXPECT_EQ(detail::parse_byte_size("16MiB"), 16 * kMiB);
  EXPECT_EQ(detail::parse_byte_size("2gb"), std::nullopt);  // B after a unit: upper case only
  EXPECT_EQ(detail::parse_byte_size("2GB"), 2 * kGiB);
  EXPECT_EQ(detail::parse_byte_size("1T"), 1024 * kGiB);
  for (const char* bad : {"", "M", "1.5G", "-1", "12 parsecs", "99999999999T"}) {
    EXPECT_EQ(detail::parse_byte_size(bad), std::nullopt) << bad;
  }
}

TEST(TrackingAllocatorLimit, RefusesBeforeAskingTheBaseAndCountsNothing) {
  TrackingAllocator tracked(host_allocator(), "dev");
  EXPECT_EQ(tracked.stats().limit_bytes, 0);  // none by default
  tracked.set_limit(1000, "; set it here");
  void* a = tracked.allocate(600);
  const MemoryStats before = tracked.stats();
  EXPECT_TESSEL_ERROR(tracked.allocate(401), ErrorCode::kResourceExhausted,
                      "Allocator: 'dev': allocating 401 B would exceed its memory "
                      "limit 1000 B (in use 600 B); set it here");
  const MemoryStats after = tracked.stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.peak_bytes, before.peak_bytes);
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  void* b = tracked.allocate(400);  // exactly at the limit
  EXPECT_EQ(tracked.stats().live_bytes, 1000);
  tracked.deallocate(a, 600);
  tracked.deallocate(b, 400);
  EXPECT_TESSEL_ERROR(tracked.set_limit(0), ErrorCode::kInvalidArgument,
                      "memory limit of 'dev' must be at least 1 byte, got 0");
}

TEST(TrackingAllocatorLimit, NamesItselfWhenTheHostRefuses) {
  TrackingAllocator tracked(host_allocator(), "dev7");
  ScopedHostLimit limit(host_memory_stats().live_bytes + kMiB);
  EXPECT_TESSEL_ERROR(tracked.allocate(size_t{2} << 20), ErrorCode::kResourceExhausted,
                      "Allocator: 'dev7': host: allocating 2.0 MiB");
  EXPECT_EQ(tracked.stats().live_bytes, 0);
  EXPECT_EQ(tracked.stats().peak_bytes, 0);
}

}  // namespace
}  // namespace tessel
