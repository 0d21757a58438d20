// Crafted plan files (issue 23): each must be refused with a clear hotline::Error, never read
// out of bounds. The test rewrites the metadata of a plan it builds from the tiny fixture.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "engine/test_util.h"

namespace hotline::engine {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path CraftDir() {
  fs::path d = fs::temp_directory_path() / ("hotline_plan_crafted_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string ReadBytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

// Rewrites the JSON metadata of plan bytes `in` with `edit` and writes the plan to `out`, with the
// same weight blobs after the new (re-padded) metadata.
void Craft(const std::string& in, const fs::path& out, const std::function<void(json&)>& edit) {
  uint64_t len;
  std::memcpy(&len, in.data() + 16, 8);
  json j = json::parse(in.substr(24, len));
  edit(j);
  const std::string meta = j.dump();
  std::string s = in.substr(0, 16);
  const uint64_t new_len = meta.size();
  s.append(reinterpret_cast<const char*>(&new_len), 8);
  s += meta;
  s.append(Align64(s.size()) - s.size(), '\0');
  s += in.substr(Align64(24 + len));
  std::ofstream f(out, std::ios::binary);
  f << s;
}

// Loading (with and without weights) must throw hotline::Error mentioning every part.
void ExpectRefused(const fs::path& plan, const std::vector<std::string>& parts) {
  for (bool weights : {true, false}) {
    try {
      if (weights) Engine::Load(plan.string());
      else ReadPlan(plan.string(), false);
      ADD_FAILURE() << plan << " loaded (weights " << weights << "); expected " << parts[0];
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kDataLoss) << e.what();
      for (const auto& p : parts) {
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
            << "message lacks '" << p << "': " << e.what();
      }
    }
  }
}

class CraftedPlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BuildOptions o;
    o.profile = Profile::Parse("1x1:2x8:4x16");
    o.tune = false;
    const std::string path = (CraftDir() / "tiny.plan").string();
    BuildPlanFile(FixturePath("tiny_op17.onnx"), o, path);
    bytes_ = ReadBytes(path);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(CraftDir(), ec);
  }
  static std::string bytes_;
};
std::string CraftedPlanTest::bytes_;

TEST_F(CraftedPlanTest, UneditedRewriteStillLoads) {  // the rewriting itself keeps plans valid
  const fs::path p = CraftDir() / "same.plan";
  Craft(bytes_, p, [](json&) {});
  auto e = Engine::Load(p.string());
  std::vector<Output> out;
  e->CreateContext()->Run(PackedBatch{{1, 5, 6, 2}, {}, {0, 4}}, &out);
  EXPECT_EQ(out.size(), 2u);
}

TEST_F(CraftedPlanTest, WeightBytesThatWrapAround) {
  const fs::path p = CraftDir() / "wb.plan";
  Craft(bytes_, p, [](json& j) {
    j["weight_bytes"] = std::numeric_limits<uint64_t>::max();
    j["weights"][0]["offset"] = uint64_t(1) << 63;
  });
  ExpectRefused(p, {"truncated", "weights need 18446744073709551615 bytes"});
}

TEST_F(CraftedPlanTest, OffsetThatWrapsAround) {
  const fs::path p = CraftDir() / "off.plan";
  std::string name;
  Craft(bytes_, p, [&](json& j) {
    json& w = j["weights"][0];
    name = w["name"];
    // 2^64 - 8: offset + bytes wraps around to bytes - 8, inside the blob region.
    ASSERT_GT(w["bytes"].get<uint64_t>(), 8u);
    w["offset"] = std::numeric_limits<uint64_t>::max() - 7;
  });
  ExpectRefused(p, {"weight '" + name + "' does not fit its table entry"});
}

TEST_F(CraftedPlanTest, NegativeAndOverflowingShapes) {
  const fs::path neg = CraftDir() / "neg.plan", big = CraftDir() / "big.plan";
  Craft(bytes_, neg, [](json& j) {
    json& w = j["weights"][0];
    const int64_t n = w["bytes"].get<int64_t>() / 4;
    w["shape"] = {-1, -n};  // numel n, as the entry says, but negative dims
  });
  ExpectRefused(neg, {"invalid dtype or shape"});
  Craft(bytes_, big, [](json& j) {
    j["weights"][0]["shape"] = {int64_t(1) << 32, int64_t(1) << 32};  // numel wraps to 0
    j["weights"][0]["bytes"] = 0;
  });
  ExpectRefused(big, {"invalid dtype or shape"});
}

TEST_F(CraftedPlanTest, EmbedLayerNormWithThreeInputs) {
  const fs::path p = CraftDir() / "eln.plan";
  bool found = false;
  Craft(bytes_, p, [&](json& j) {
    for (json& n : j["nodes"]) {
      if (n["op"] == "EmbedLayerNorm") {
        n["inputs"] = {n["inputs"][0], n["inputs"][1], n["inputs"][2]};
        found = true;
      }
    }
  });
  ASSERT_TRUE(found) << "the tiny plan has no EmbedLayerNorm node to cut";
  ExpectRefused(p, {"invalid graph", "EmbedLayerNorm", "expected 7 inputs and an output, got 3 inputs"});
}

TEST_F(CraftedPlanTest, EmbedLayerNormTableNotAConstant) {
  const fs::path p = CraftDir() / "eln2.plan";
  Craft(bytes_, p, [&](json& j) {
    for (json& n : j["nodes"]) {
      if (n["op"] == "EmbedLayerNorm") n["inputs"][2] = n["inputs"][0];  // ids as the word table
    }
  });
  ExpectRefused(p, {"invalid graph", "input #2 must be a constant [rows, hidden] table"});
}

TEST_F(CraftedPlanTest, NodeReadingAnUndefinedValue) {
  const fs::path p = CraftDir() / "undef.plan";
  Craft(bytes_, p, [](json& j) { j["nodes"][1]["inputs"][0] = "no_such_value"; });
  ExpectRefused(p, {"invalid graph", "'no_such_value'"});
}

}  // namespace
}  // namespace hotline::engine
