// A crafted plan in a model folder's cache/ (issue 23: it used to crash `hotline serve` with
// SIGSEGV) is reported loudly and rebuilt from the ONNX model; the rebuilt pipeline works.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "nlu/pipeline.h"

namespace hotline::nlu {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string CopyTinyModel(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("hotline_crafted_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(std::string(HOTLINE_SOURCE_DIR) + "/tests/fixtures/nlu/tiny_model", dir,
           fs::copy_options::recursive);
  return dir.string();
}

std::string ReadBytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Rewrites the plan's JSON metadata in place with `edit`, keeping the weight blobs.
void CraftInPlace(const std::string& path, const std::function<void(json&)>& edit) {
  const std::string in = ReadBytes(path);
  ASSERT_GT(in.size(), 24u);
  uint64_t len;
  std::memcpy(&len, in.data() + 16, 8);
  json j = json::parse(in.substr(24, len));
  edit(j);
  const std::string meta = j.dump();
  auto align = [](size_t n) { return (n + 63) / 64 * 64; };
  std::string s = in.substr(0, 16);
  const uint64_t new_len = meta.size();
  s.append(reinterpret_cast<const char*>(&new_len), 8);
  s += meta;
  s.append(align(s.size()) - s.size(), '\0');
  s += in.substr(align(24 + len));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << s;
}

void ExpectRebuilt(const std::string& name, const std::function<void(json&)>& edit) {
  const std::string dir = CopyTinyModel(name);
  PipelineOptions o;
  std::string plan;
  {
    auto a = Pipeline::Open(dir, o);
    plan = a->plan_path();
    ASSERT_FALSE(plan.empty());
  }
  CraftInPlace(plan, edit);
  const std::string crafted = ReadBytes(plan);
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Pipeline> b;
  try {
    b = Pipeline::Open(dir, o);
  } catch (const std::exception& e) {
    ::testing::internal::GetCapturedStderr();
    FAIL() << "a crafted cached plan must be rebuilt, got: " << e.what();
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("WARNING: cached plan " + plan + " is unusable"), std::string::npos) << log;
  EXPECT_NE(log.find("rebuilding it from"), std::string::npos) << log;
  EXPECT_EQ(b->plan_path(), plan);
  EXPECT_NE(ReadBytes(plan), crafted);  // replaced by a fresh build
  EXPECT_EQ(b->Understand({"你好"}, std::chrono::system_clock::now())[0].intent, "greeting");
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(CraftedCachedPlan, WrappingWeightBytesIsRebuilt) {
  ExpectRebuilt("wb", [](json& j) {
    j["weight_bytes"] = std::numeric_limits<uint64_t>::max();
    j["weights"][0]["offset"] = uint64_t(1) << 63;
  });
}

TEST(CraftedCachedPlan, EmbedLayerNormWithThreeInputsIsRebuilt) {
  ExpectRebuilt("eln", [](json& j) {
    int cut = 0;
    for (json& n : j["nodes"]) {
      if (n["op"] == "EmbedLayerNorm") {
        n["inputs"] = {n["inputs"][0], n["inputs"][1], n["inputs"][2]};
        ++cut;
      }
    }
    ASSERT_EQ(cut, 1) << "the tiny model's plan should have one EmbedLayerNorm";
  });
}

}  // namespace
}  // namespace hotline::nlu
