// A fresh scratch folder under the system temp directory, removed with everything in it when the
// object goes (plans and cut data files of one calibrate, gate or compare run).
#pragma once

#include <filesystem>
#include <string>

namespace hotline {

class TempDir {
 public:
  // Creates <tmp>/<prefix>-<pid>-<random>; throws hotline::Error when it cannot.
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace hotline
