// A fresh empty directory under the system's temporary directory, removed at the end of its scope
// (for the tests that write files: checkpoints).
//
//   TempDir dir("tessel-ckpt");
//   save(dir / "step1", state);
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace tessel::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tessel-test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tessel::testing
