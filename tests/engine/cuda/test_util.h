// Helpers for the CUDA tests: device buffers, fresh random data, tolerances per element type.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"

namespace hotline::engine::cuda::test {

// Whether a CUDA device is present; says loudly when not (`what`: the tests that then skip).
inline bool HaveGpu(const char* what) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    std::printf("*** NO CUDA DEVICE: %s tests SKIPPED (run them on a GPU) ***\n", what);
    return false;
  }
  return true;
}

// Normalised-error bounds per element type (the proof criteria).
inline double Tol(DType t) { return t == DType::kF32 ? 1e-5 : t == DType::kF16 ? 1e-2 : 4e-2; }

inline const std::vector<DType>& AllTypes() {
  static const std::vector<DType> v = {DType::kF32, DType::kF16, DType::kBF16};
  return v;
}

// Fresh seed per process (logged so a failure can be replayed with HOTLINE_TEST_SEED).
inline uint64_t Seed() {
  static const uint64_t s = [] {
    const char* env = std::getenv("HOTLINE_TEST_SEED");
    const uint64_t v = env ? std::stoull(env) : std::random_device{}();
    std::printf("random seed %llu (set HOTLINE_TEST_SEED to replay)\n", (unsigned long long)v);
    return v;
  }();
  return s;
}

inline std::vector<float> RandomVec(std::mt19937_64& rng, size_t n, float lo = -1.f,
                                    float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Owning device buffer.
class DevBuf {
 public:
  explicit DevBuf(size_t bytes) : bytes_(bytes) { CUDA_CHECK(cudaMalloc(&p_, bytes ? bytes : 1)); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void* get() const { return p_; }
  template <typename T> T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// Uploads host FP32 values as `t` and replaces `host` by the values the device holds (rounded to
// t), so references compute on exactly the kernel's inputs.
inline std::unique_ptr<DevBuf> Upload(DType t, std::vector<float>& host) {
  auto d = std::make_unique<DevBuf>(host.size() * DTypeSize(t));
  DevBuf tmp(host.size() * 4);
  CUDA_CHECK(cudaMemcpy(tmp.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  ConvertFromF32(tmp.as<float>(), int64_t(host.size()), t, d->get(), nullptr);
  ConvertToF32(d->get(), t, int64_t(host.size()), tmp.as<float>(), nullptr);
  CUDA_CHECK(cudaMemcpy(host.data(), tmp.get(), host.size() * 4, cudaMemcpyDeviceToHost));
  return d;
}

inline std::unique_ptr<DevBuf> UploadF32(const std::vector<float>& host) {
  auto d = std::make_unique<DevBuf>(host.size() * 4);
  CUDA_CHECK(cudaMemcpy(d->get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::unique_ptr<DevBuf> UploadRaw(const std::vector<T>& host) {
  auto d = std::make_unique<DevBuf>(host.size() * sizeof(T));
  CUDA_CHECK(cudaMemcpy(d->get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

inline std::vector<float> Download(DType t, const void* dev, size_t n) {
  DevBuf tmp(n * 4);
  ConvertToF32(dev, t, int64_t(n), tmp.as<float>(), nullptr);
  std::vector<float> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), tmp.get(), n * 4, cudaMemcpyDeviceToHost));
  return h;
}

// Packed batch of `batch` sequences with random lengths in [1, max_len]; the longest is forced to
// max_len and the shortest to 1 so every test covers both ends.
inline std::vector<int32_t> RandomCu(std::mt19937_64& rng, int batch, int max_len) {
  std::uniform_int_distribution<int> d(1, max_len);
  std::vector<int32_t> cu(batch + 1, 0);
  for (int b = 0; b < batch; ++b) {
    int len = d(rng);
    if (b == 0) len = max_len;
    if (b == 1) len = 1;
    cu[b + 1] = cu[b] + len;
  }
  return cu;
}

// A fresh folder under the temp directory (anything a crashed earlier run of the same pid left
// there removed first), removed again when the scope ends, also when an ASSERT leaves the test.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace hotline::engine::cuda::test
