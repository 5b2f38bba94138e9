// POSIX implementations of the checkpoint layer's file helpers.
#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/errors.h"

namespace tessel::checkpoint::detail {
namespace {

constexpr std::string_view kComponent = "checkpoint";

int open_or_throw(const std::string& path, int flags, std::string_view what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw_io(what, path);
  return fd;
}

}  // namespace

void throw_io(std::string_view what, const std::string& path) {
  const int err = errno;
  const ErrorCode code = err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable;
  tessel::detail::throw_error(code, kComponent, "cannot {} '{}': {}", what, path,
                              std::strerror(err));
}

OutputFile::OutputFile(const std::string& path)
    : path_(path), fd_(open_or_throw(path, O_WRONLY | O_CREAT | O_TRUNC, "create")) {}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, std::min(size, kWriteBackBytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io("write", path_);
    }
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
    start_write_back();
  }
}

void OutputFile::start_write_back() {
  if (written_ - write_back_from_ < kWriteBackBytes) return;
  // Asks the kernel to start writing these pages now (it does not wait for them), so that the
  // disk works while the rest is copied and the final fdatasync finds little left. Advice only:
  // a file system that refuses it is flushed by the fdatasync as before.
  ::sync_file_range(fd_, static_cast<off_t>(write_back_from_),
                    static_cast<off_t>(written_ - write_back_from_), SYNC_FILE_RANGE_WRITE);
  write_back_from_ = written_;
}

void OutputFile::sync_and_close() {
  if (::fdatasync(fd_) != 0) throw_io("fdatasync", path_);
  close();
}

void OutputFile::close() {
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_io("close", path_);
}

void write_file(const std::string& path, std::string_view text) {
  OutputFile out(path);
  out.write(text.data(), text.size());
  out.sync_and_close();
}

void write_file_unsynced(const std::string& path, std::string_view text) {
  OutputFile out(path);
  out.write(text.data(), text.size());
  out.close();
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_io("stat", path);
  return static_cast<uint64_t>(st.st_size);
}

std::string read_range(const std::string& path, uint64_t offset, size_t size) {
  const int fd = open_or_throw(path, O_RDONLY, "open");
  std::string bytes(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd, bytes.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      throw_io("read", path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done < size) {
    tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                "'{}' is truncated: wanted bytes [{}, {}), the file ends at {}",
                                path, offset, offset + size, offset + done);
  }
  return bytes;
}

std::string read_file(const std::string& path) { return read_range(path, 0, file_size(path)); }

void sync_directory(const std::string& path) {
  const int fd = open_or_throw(path, O_RDONLY | O_DIRECTORY, "open directory");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    errno = err;
    throw_io("fsync directory", path);
  }
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_or_throw(path, O_RDONLY, "open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw_io("stat", path);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      errno = err;
      throw_io("mmap", path);
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
}

void MappedFile::populate(uint64_t offset, uint64_t size) const {
  if (size == 0 || offset >= size_) return;
  static const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t from = offset / page * page, until = std::min(size_, offset + size);
#if defined(MADV_POPULATE_READ)
  ::madvise(const_cast<unsigned char*>(data_) + from, until - from, MADV_POPULATE_READ);
#else
  ::madvise(const_cast<unsigned char*>(data_) + from, until - from, MADV_WILLNEED);
#endif
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace tessel::checkpoint::detail
