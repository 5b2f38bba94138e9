// POSIX file helpers of the checkpoint layer: whole writes with fsync, reads of byte ranges
// (pread), read-only memory maps, directory fsync. Every failure is a tessel::Error naming the
// path and the system's reason (strerror); ENOENT is kNotFound, ENOSPC / EROFS / EACCES and other
// I/O errors are kUnavailable (the storage refused), short files are kDataLoss.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessel::checkpoint::detail {

// Throws the Error for a failed system call on `path` (errno read here).
[[noreturn]] void throw_io(std::string_view what, const std::string& path);

// A file opened for writing (created, truncated); closes on destruction.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Every kWriteBackBytes written, the kernel is asked to start writing them to the storage
  // (sync_file_range), so that the final flush overlaps the rest of the writing.
  void write(const void* data, size_t size);
  // fdatasync (the data and the size), then close: the bytes are on the storage when this
  // returns.
  void sync_and_close();
  // Close without flushing (files that need not survive a crash).
  void close();
  uint64_t size() const { return written_; }

  static constexpr size_t kWriteBackBytes = size_t{8} << 20;

 private:
  void start_write_back();

  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  uint64_t write_back_from_ = 0;  // written_ when write-back was last started
};

// Writes `text` to `path` and fsyncs it.
void write_file(const std::string& path, std::string_view text);
// Writes `text` to `path`, not flushed (a process's index, read before the manifest is written).
void write_file_unsynced(const std::string& path, std::string_view text);
// The whole file as bytes.
std::string read_file(const std::string& path);
// `size` bytes at `offset`: fewer available is kDataLoss naming the path.
std::string read_range(const std::string& path, uint64_t offset, size_t size);
// Bytes of the file; a missing file is kNotFound.
uint64_t file_size(const std::string& path);
// fsync of a directory, so that the entries made or renamed in it are durable.
void sync_directory(const std::string& path);

// A read-only memory map of a whole file (pages are read only when touched).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Brings the pages of bytes [offset, offset + size) into the map in one go (from the page
  // cache, or the storage), so that reading them takes no page fault each. Advice: a system that
  // refuses it leaves them to be faulted in on first read.
  void populate(uint64_t offset, uint64_t size) const;

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace tessel::checkpoint::detail
