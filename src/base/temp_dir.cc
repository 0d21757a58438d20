#include "base/temp_dir.h"

#include <unistd.h>

#include <random>
#include <system_error>

#include "base/error.h"

namespace hotline {

TempDir::TempDir(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::random_device rd;
  for (int attempt = 0; attempt < 8; ++attempt) {
    fs::path p = fs::temp_directory_path() /
                 (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::error_code ec;
    if (fs::create_directory(p, ec)) {  // false when it exists already: draw another name
      path_ = std::move(p);
      return;
    }
    if (ec) throw Error("cannot create a scratch folder '" + p.string() + "': " + ec.message());
  }
  throw Error("cannot create a scratch folder for " + prefix + ": every name drawn exists");
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort: a destructor must not throw
}

}  // namespace hotline
