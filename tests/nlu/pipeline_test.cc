// The pipeline end to end on the tiny fixture model (tests/fixtures/nlu/tiny_model, made by
// make_tiny_model.py) against PyTorch's outputs for the same texts (tiny_reference.json: token ids
// from transformers' BertTokenizer, intent logits, per-token slot argmax, spans decoded in Python).
// Also model-folder errors and bad input.
#include "nlu/pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include <unistd.h>

#include "base/error.h"
#include "nlu/json_io.h"

namespace hotline::nlu {
namespace {
namespace fs = std::filesystem;

const std::string kFixture = std::string(HOTLINE_SOURCE_DIR) + "/tests/fixtures/nlu/tiny_model";

// A private copy of the fixture folder so the plan cache goes to a temporary place. Named by
// process id: ctest runs each test case in its own process, several at a time.
std::string CopyFixture(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("hotline_nlu_" + name + "_" + std::to_string(::getpid()));
  // Removed when the process ends (files in use stay readable until closed).
  static struct Cleanup {
    std::vector<fs::path> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& d : dirs) fs::remove_all(d, ec);
    }
  } cleanup;
  fs::remove_all(dir);
  fs::copy(kFixture, dir, fs::copy_options::recursive);
  cleanup.dirs.push_back(dir);
  return dir.string();
}

std::shared_ptr<Pipeline> SharedPipeline() {
  static std::shared_ptr<Pipeline> p = [] {
    PipelineOptions o;
    o.debug_tokens = true;
    o.contexts = 2;
    return std::shared_ptr<Pipeline>(Pipeline::Open(CopyFixture("shared"), o));
  }();
  return p;
}

nlohmann::json Reference() {
  std::ifstream in(std::string(HOTLINE_SOURCE_DIR) + "/tests/fixtures/nlu/tiny_reference.json");
  return nlohmann::json::parse(in);
}

const auto kNow = std::chrono::system_clock::now();

TEST(Pipeline, MatchesPyTorch) {
  auto p = SharedPipeline();
  const auto ref = Reference();
  ASSERT_GE(ref.size(), 20u);
  std::vector<std::string> texts;
  for (const auto& r : ref) texts.push_back(r["text"]);
  const auto got = p->Understand(texts, kNow);
  ASSERT_EQ(got.size(), ref.size());
  const auto& intents = p->labels().intents;
  for (size_t i = 0; i < ref.size(); ++i) {
    const auto& r = ref[i];
    const Understanding& u = got[i];
    SCOPED_TRACE(texts[i]);
    EXPECT_EQ(u.token_ids, r["input_ids"].get<std::vector<int>>());
    // Tags at [CLS]/[SEP] are not used; compare the text's tokens.
    auto want_tags = r["slot_tags"].get<std::vector<std::string>>();
    ASSERT_EQ(u.token_tags.size(), want_tags.size());
    for (size_t t = 1; t + 1 < want_tags.size(); ++t) EXPECT_EQ(u.token_tags[t], want_tags[t]) << t;
    EXPECT_EQ(u.intent, r["intent"].get<std::string>());
    EXPECT_NEAR(u.confidence, r["confidence"].get<double>(), 1e-4);
    // Top-k probabilities: softmax of PyTorch's logits.
    const auto logits = r["intent_logits"].get<std::vector<double>>();
    double mx = logits[0], sum = 0;
    for (double v : logits) mx = std::max(mx, v);
    for (double v : logits) sum += std::exp(v - mx);
    ASSERT_EQ(u.top_k.size(), 3u);
    for (const auto& s : u.top_k) {
      const size_t k = std::find(intents.begin(), intents.end(), s.intent) - intents.begin();
      ASSERT_LT(k, intents.size());
      EXPECT_NEAR(s.probability, std::exp(logits[k] - mx) / sum, 1e-4);
    }
    EXPECT_GE(u.top_k[0].probability, u.top_k[1].probability);
    const IntentInfo* info = p->taxonomy().FindIntent(u.intent);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(u.department, info->dept);
    EXPECT_EQ(u.business_line, info->line);
    ASSERT_EQ(u.slots.size(), r["slots"].size());
    for (size_t s = 0; s < u.slots.size(); ++s) {
      EXPECT_EQ(u.slots[s].type, r["slots"][s]["type"].get<std::string>());
      EXPECT_EQ(u.slots[s].start, r["slots"][s]["start"].get<int>());
      EXPECT_EQ(u.slots[s].end, r["slots"][s]["end"].get<int>());
      EXPECT_EQ(u.slots[s].value, r["slots"][s]["value"].get<std::string>());
    }
    EXPECT_FALSE(u.truncated);
  }
}

TEST(Pipeline, NormalisersFillSlots) {
  auto p = SharedPipeline();
  const auto u = p->Understand({"车牌京A12345的出租车拒载。"}, kNow)[0];
  ASSERT_EQ(u.intent, "taxi_complaint");
  ASSERT_EQ(u.slots.size(), 1u);
  EXPECT_EQ(u.slots[0].type, "plate_number");
  EXPECT_EQ(u.slots[0].value, "京A12345");
  EXPECT_EQ(u.slots[0].normalized, "京A12345");
  EXPECT_TRUE(u.slots[0].valid);
  const auto j = ToJson(u);
  EXPECT_EQ(j["department"], "transport");
  // The fixture's taxonomy is the current one (125 intents) under a 55-intent model.
  EXPECT_EQ(u.category, "transport");
  EXPECT_EQ(j["category"], "transport");
  EXPECT_EQ(j["category_name"], "交通运输");
  EXPECT_EQ(j["slots"][0]["start"], 2);
}

TEST(Pipeline, EmptyTextIsOutOfScopeWithoutEngine) {
  auto p = SharedPipeline();
  const auto got = p->Understand({"", "  \t\xE3\x80\x80", "\x01\x02", "你好"}, kNow);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].intent, "out_of_scope") << i;
    EXPECT_EQ(got[i].confidence, 0.0f);
    EXPECT_TRUE(got[i].slots.empty());
    EXPECT_TRUE(got[i].top_k.empty());
    EXPECT_EQ(got[i].department, "hotline");
    EXPECT_EQ(got[i].business_line, "service");
  }
  EXPECT_EQ(got[3].intent, "greeting");
  EXPECT_TRUE(p->Understand({}, kNow).empty());
}

TEST(Pipeline, LongTextIsTruncatedAndFlagged) {
  auto p = SharedPipeline();
  std::string text;
  for (int i = 0; i < 30; ++i) text += "朝阳区停水了";  // 180 characters, model takes 64 tokens
  const auto u = p->Understand({text, "朝阳区停水了"}, kNow);
  EXPECT_TRUE(u[0].truncated);
  EXPECT_EQ(u[0].num_tokens, p->config().max_length);
  EXPECT_FALSE(u[1].truncated);
  for (const auto& s : u[0].slots) EXPECT_LE(s.end, 62);  // only what the model saw
}

TEST(Pipeline, InvalidUtf8IsAnErrorNamingTheText) {
  auto p = SharedPipeline();
  try {
    p->Understand({"你好", "abc\xC3"}, kNow);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("text 1: invalid UTF-8 at byte 3"), std::string::npos)
        << e.what();
  }
}

// Large calls tokenise on several threads (pipeline.cc ParallelFor): every result must equal the
// result of understanding that text alone, and the error must name the lowest bad index.
TEST(Pipeline, LargeCallsMatchOneByOneAndNameTheFirstBadText) {
  auto p = SharedPipeline();
  const std::vector<std::string> kinds = {"朝阳区建国路停电了", "你好", "车牌京A12345的出租车拒载。",
                                          "", "我要投诉小区物业不给修电梯", "谢谢再见"};
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(kinds[(i * 7) % kinds.size()]);
  const auto got = p->Understand(texts, kNow);
  ASSERT_EQ(got.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto alone = p->Understand({texts[i]}, kNow)[0];
    EXPECT_EQ(got[i].intent, alone.intent) << i;
    EXPECT_NEAR(got[i].confidence, alone.confidence, 1e-5) << i;
    EXPECT_EQ(got[i].num_tokens, alone.num_tokens) << i;
    ASSERT_EQ(got[i].slots.size(), alone.slots.size()) << i;
    for (size_t k = 0; k < alone.slots.size(); ++k) {
      EXPECT_EQ(got[i].slots[k].value, alone.slots[k].value) << i;
      EXPECT_EQ(got[i].slots[k].start, alone.slots[k].start) << i;
    }
  }
  texts[150] = "abc\xC3";  // both halves of the call have a bad text: the first one is named
  texts[60] = "\xFF你好";
  try {
    p->Understand(texts, kNow);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("text 60: invalid UTF-8"), std::string::npos)
        << e.what();
  }
}

TEST(Pipeline, BatchesLargerThanTheProfileAndThreads) {
  auto p = SharedPipeline();
  ASSERT_LT(p->plan_info().profile.max_batch, 20);
  std::vector<std::string> texts;
  for (int i = 0; i < 20; ++i) texts.push_back(i % 2 ? "你好" : "朝阳区建国路停电了");
  const auto one = p->Understand({texts[0], texts[1]}, kNow);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 3; ++r) {
        const auto got = p->Understand(texts, kNow);
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i].intent != one[i % 2].intent ||
              std::fabs(got[i].confidence - one[i % 2].confidence) > 1e-5 ||
              got[i].slots.size() != one[i % 2].slots.size())
            ++bad;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Pipeline, PlanIsCachedAndReused) {
  const std::string dir = CopyFixture("cache");
  PipelineOptions o;
  auto a = Pipeline::Open(dir, o);
  ASSERT_FALSE(a->plan_path().empty());
  EXPECT_TRUE(fs::exists(a->plan_path()));
  EXPECT_EQ(fs::path(a->plan_path()).parent_path(), fs::path(dir) / "cache");
  EXPECT_EQ(fs::path(a->plan_path()).filename().string().rfind("tiny-fp32-cpu-", 0), 0u);
  const auto t = fs::last_write_time(a->plan_path());
  auto b = Pipeline::Open(dir, o);
  EXPECT_EQ(b->plan_path(), a->plan_path());
  EXPECT_EQ(fs::last_write_time(b->plan_path()), t);  // loaded, not rebuilt
  // A corrupt cached plan is rebuilt, not fatal.
  { std::ofstream(a->plan_path(), std::ios::trunc) << "garbage"; }
  auto c = Pipeline::Open(dir, o);
  EXPECT_GT(fs::file_size(c->plan_path()), 1000u);
  EXPECT_EQ(c->Understand({"你好"}, kNow)[0].intent, "greeting");
}

// Model folder errors: each case edits a copy of the fixture and expects a message fragment.
struct FolderCase {
  const char* name;
  std::function<void(const std::string&)> edit;
  const char* want;
};

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void ReplaceIn(const std::string& path, const std::string& from, const std::string& to) {
  std::string s = Read(path);
  const size_t k = s.find(from);
  ASSERT_NE(k, std::string::npos) << from;
  s.replace(k, from.size(), to);
  Write(path, s);
}

TEST(ModelFolder, ErrorsAtLoad) {
  const std::vector<FolderCase> cases = {
      {"no folder", [](const std::string& d) { fs::remove_all(d); }, "does not exist"},
      {"no model.yaml", [](const std::string& d) { fs::remove(d + "/model.yaml"); },
       "has no model.yaml"},
      {"bad YAML", [](const std::string& d) { Write(d + "/model.yaml", "name: [x\n"); },
       "not valid YAML"},
      {"no name", [](const std::string& d) { Write(d + "/model.yaml", "version: \"1\"\n"); },
       "missing field 'name'"},
      {"bad max_length",
       [](const std::string& d) { ReplaceIn(d + "/model.yaml", "max_length: 64", "max_length: x"); },
       "wrong type"},
      {"bad precision",
       [](const std::string& d) { ReplaceIn(d + "/model.yaml", "precision: fp32", "precision: fp7"); },
       "fp7"},
      {"unknown intent",
       [](const std::string& d) {
         ReplaceIn(d + "/labels.json", "\"pension_inquiry\"", "\"pay_taxes\"");
       },
       "intent 'pay_taxes' is not in the taxonomy"},
      {"unknown slot",
       [](const std::string& d) { ReplaceIn(d + "/labels.json", "\"B-item\"", "\"B-colour\""); },
       "slot tag 'B-colour' names a slot type that is not in the taxonomy"},
      {"bad tag", [](const std::string& d) { ReplaceIn(d + "/labels.json", "\"I-item\"", "\"Q\""); },
       "slot tag 'Q' is not B-<slot> or I-<slot>"},
      {"labels not JSON", [](const std::string& d) { Write(d + "/labels.json", "{"); },
       "not valid JSON"},
      {"intent count differs from the ONNX",
       [](const std::string& d) { ReplaceIn(d + "/labels.json", "\"pension_inquiry\",", ""); },
       "labels.json lists 54 intents"},
      {"tag count differs from the ONNX",
       [](const std::string& d) { ReplaceIn(d + "/labels.json", ",\n  \"I-item\"", ""); },
       "lists 24 slot tags"},
      {"no vocab", [](const std::string& d) { fs::remove(d + "/vocab.txt"); },
       "cannot open vocabulary file"},
      {"no taxonomy", [](const std::string& d) { fs::remove(d + "/taxonomy.yaml"); },
       "cannot open taxonomy file"},
      {"no ONNX and no plan", [](const std::string& d) { fs::remove(d + "/model.onnx"); },
       "has neither the ONNX file"},
  };
  for (const auto& c : cases) {
    const std::string dir = CopyFixture("bad");
    c.edit(dir);
    try {
      Pipeline::Open(dir, {});
      ADD_FAILURE() << c.name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos)
          << c.name << ": " << e.what();
    }
  }
}

TEST(JsonIo, ParseIsoTime) {
  using namespace std::chrono;
  const auto t = ParseIsoTime("2026-11-28T22:00:00+08:00");
  ASSERT_TRUE(t);
  EXPECT_EQ(duration_cast<seconds>(t->time_since_epoch()).count(), 1795874400);
  EXPECT_EQ(ParseIsoTime("2026-11-28T14:00:00Z"), t);
  EXPECT_EQ(ParseIsoTime("2026-11-28 22:00:00"), t);  // +08:00 assumed
  EXPECT_FALSE(ParseIsoTime("2026-13-01T00:00:00Z"));
  EXPECT_FALSE(ParseIsoTime("yesterday"));
}

}  // namespace
}  // namespace hotline::nlu
