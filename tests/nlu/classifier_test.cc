// Classifier model folders (kind: classifier) on the tiny fixture (tests/fixtures/nlu/
// tiny_classifier, made by make_tiny_classifier.py) against its reference: the token ids the model
// must see after the long-text cut (the script's own head/tail cut of transformers' BertTokenizer
// ids) and ONNX Runtime's probabilities on the same FP16-weight file at the folder's temperatures.
// Also the joint model's calibration keys and bad classifier folders.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include <unistd.h>

#include "base/error.h"
#include "nlu/json_io.h"
#include "nlu/pipeline.h"

namespace hotline::nlu {
namespace {
namespace fs = std::filesystem;

const std::string kFixtures = std::string(HOTLINE_SOURCE_DIR) + "/tests/fixtures/nlu/";
const auto kNow = std::chrono::system_clock::now();

// A private copy of a fixture folder (plans are cached inside it), removed at process exit.
std::string Copy(const std::string& fixture, const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("hotline_cls_" + name + "_" + std::to_string(::getpid()));
  static struct Cleanup {
    std::vector<fs::path> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& d : dirs) fs::remove_all(d, ec);
    }
  } cleanup;
  fs::remove_all(dir);
  fs::copy(kFixtures + fixture, dir, fs::copy_options::recursive);
  cleanup.dirs.push_back(dir);
  return dir.string();
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void ReplaceIn(const std::string& path, const std::string& from, const std::string& to) {
  std::string s = Read(path);
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << path;
  s.replace(at, from.size(), to);
  Write(path, s);
}

nlohmann::json Reference() {
  std::ifstream in(kFixtures + "tiny_classifier_reference.json");
  return nlohmann::json::parse(in);
}

TEST(KeptTokens, HandCountedCuts) {
  using V = std::vector<int>;
  // 10 tokens = [CLS] + 8 + [SEP] into 6: 4 content tokens.
  EXPECT_EQ(KeptTokens(10, 6, LongText::kTruncate), (V{0, 1, 2, 3, 4, 9}));
  EXPECT_EQ(KeptTokens(10, 6, LongText::kHeadTail), (V{0, 1, 2, 7, 8, 9}));
  // 5 content tokens: the head takes the odd one.
  EXPECT_EQ(KeptTokens(10, 7, LongText::kHeadTail), (V{0, 1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(KeptTokens(6, 6, LongText::kHeadTail), (V{0, 1, 2, 3, 4, 5}));  // fits
  EXPECT_EQ(KeptTokens(2, 6, LongText::kHeadTail), (V{0, 1}));
  // 256: 127 from the head, 127 from the tail.
  const V k = KeptTokens(402, 256, LongText::kHeadTail);
  ASSERT_EQ(k.size(), 256u);
  EXPECT_EQ(k[127], 127);
  EXPECT_EQ(k[128], 401 - 127);
  EXPECT_EQ(k[254], 400);
  EXPECT_EQ(k[255], 401);
  EXPECT_THROW(KeptTokens(10, 2, LongText::kHeadTail), Error);
}

// Every reference case through the pipeline in one batch, for one long_text mode.
void CheckAgainstReference(const std::string& dir, const std::string& mode) {
  PipelineOptions o;
  o.debug_tokens = true;
  auto p = Pipeline::Open(dir, o);
  const auto ref = Reference();
  const auto& labels = p->classifier_labels();
  ASSERT_EQ(labels.heads.size(), 2u);
  std::vector<std::string> texts;
  for (const auto& c : ref["cases"]) texts.push_back(c["text"]);
  const auto got = p->Understand(texts, kNow);
  ASSERT_EQ(got.size(), texts.size());
  int long_ones = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& want = ref["cases"][i]["modes"][mode];
    const Understanding& u = got[i];
    SCOPED_TRACE(mode + ": " + texts[i]);
    EXPECT_EQ(u.token_ids, want["input_ids"].get<std::vector<int>>());
    EXPECT_EQ(u.truncated, want["truncated"].get<bool>());
    EXPECT_EQ(u.num_tokens, int(want["input_ids"].size()));
    long_ones += u.truncated;
    ASSERT_EQ(u.heads.size(), 2u);
    EXPECT_EQ(u.heads[0].head, "department");
    EXPECT_EQ(u.heads[1].head, "category");
    EXPECT_EQ(u.heads[0].label, want["department"].get<std::string>());
    EXPECT_EQ(u.heads[1].label, want["category"].get<std::string>());
    EXPECT_EQ(u.department, u.heads[0].label);
    EXPECT_TRUE(u.intent.empty() && u.slots.empty());
    // top_k: model.yaml's 4, best first, each with ONNX Runtime's probability of that label.
    std::vector<std::string> order;
    for (const auto& t : u.heads[0].top_k) order.push_back(t.label);
    EXPECT_EQ(order, want["department_top_k"].get<std::vector<std::string>>());
    for (size_t h = 0; h < 2; ++h) {
      const auto probs = want[h == 0 ? "department_probs" : "category_probs"];
      EXPECT_EQ(u.heads[h].top_k.size(), std::min<size_t>(4, labels.heads[h].size()));
      for (const auto& t : u.heads[h].top_k) {
        const size_t k = std::find(labels.heads[h].begin(), labels.heads[h].end(), t.label) -
                         labels.heads[h].begin();
        ASSERT_LT(k, labels.heads[h].size());
        EXPECT_NEAR(t.score, probs[k].get<double>(), 2e-4) << t.label;
      }
      EXPECT_EQ(u.heads[h].score, u.heads[h].top_k[0].score);
    }
  }
  EXPECT_GE(long_ones, 6);
}

TEST(Classifier, HeadTailMatchesReference) {
  CheckAgainstReference(Copy("tiny_classifier", "ht"), "head_tail");
}

TEST(Classifier, TruncateMatchesReference) {
  const std::string dir = Copy("tiny_classifier", "tr");
  ReplaceIn(dir + "/model.yaml", "long_text: head_tail", "long_text: truncate");
  CheckAgainstReference(dir, "truncate");
}

TEST(Classifier, TemperatureChangesScoresNotLabels) {
  // Temperature 1 for department: the probabilities are those of the raw logits, which the
  // reference's (at 1.3) give back: p1 ∝ p1.3^1.3.
  const std::string dir = Copy("tiny_classifier", "t1");
  ReplaceIn(dir + "/model.yaml", "department: 1.3,", "department: 1.0,");
  PipelineOptions o;
  o.head_top_k = 5;  // every department: the whole distribution
  auto p = Pipeline::Open(dir, o);
  const auto ref = Reference();
  const auto& c = ref["cases"][0];
  const auto u = p->Understand({c["text"].get<std::string>()}, kNow)[0];
  const auto probs = c["modes"]["head_tail"]["department_probs"].get<std::vector<double>>();
  ASSERT_EQ(u.heads[0].top_k.size(), probs.size());
  double z = 0;
  for (double q : probs) z += std::pow(q, 1.3);
  const auto& names = p->classifier_labels().heads[0];
  for (const auto& t : u.heads[0].top_k) {
    const size_t k = std::find(names.begin(), names.end(), t.label) - names.begin();
    EXPECT_NEAR(t.score, std::pow(probs[k], 1.3) / z, 2e-4) << t.label;
  }
  EXPECT_EQ(u.heads[0].label, c["modes"]["head_tail"]["department"].get<std::string>());
  EXPECT_GT(u.heads[0].score, u.heads[0].top_k[1].score);
}

TEST(Classifier, EmptyTextAndJson) {
  auto p = Pipeline::Open(Copy("tiny_classifier", "json"), {});
  const auto ref = Reference();
  const auto u = p->Understand({"", ref["cases"][0]["text"].get<std::string>()}, kNow);
  ASSERT_EQ(u[0].heads.size(), 2u);
  EXPECT_EQ(u[0].heads[0].label, "");
  EXPECT_EQ(u[0].heads[0].score, 0);
  const nlohmann::json j = ToJson(u[1]);
  EXPECT_EQ(j["department"], u[1].heads[0].label);
  EXPECT_EQ(j["category"], u[1].heads[1].label);
  EXPECT_FLOAT_EQ(j["department_score"].get<float>(), u[1].heads[0].score);
  EXPECT_FLOAT_EQ(j["category_score"].get<float>(), u[1].heads[1].score);
  ASSERT_EQ(j["top_k"].size(), 4u);
  EXPECT_EQ(j["top_k"][0]["department"], u[1].heads[0].label);
  EXPECT_EQ(j["category_top_k"][0]["category"], u[1].heads[1].label);
  EXPECT_FALSE(j.contains("intent"));
  EXPECT_THROW(p->Understand({std::string("\xff")}, kNow), Error);
}

TEST(Classifier, BadFoldersGiveClearErrors) {
  struct Case {
    std::string name;
    std::function<void(const std::string&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"unknown kind",
       [](const std::string& d) { ReplaceIn(d + "/model.yaml", "kind: classifier", "kind: ner"); },
       "kind must be joint or classifier"},
      {"unknown long_text",
       [](const std::string& d) {
         ReplaceIn(d + "/model.yaml", "long_text: head_tail", "long_text: middle");
       },
       "long_text must be truncate or head_tail"},
      {"no outputs",
       [](const std::string& d) {
         ReplaceIn(d + "/model.yaml",
                   "outputs: {department: department_logits, category: category_logits}", "");
       },
       "a classifier needs outputs"},
      {"missing output",
       [](const std::string& d) {
         ReplaceIn(d + "/model.yaml", "category: category_logits", "category: cat_logits");
       },
       "has no output named 'cat_logits' (head 'category')"},
      {"labels of the wrong length",
       [](const std::string& d) { ReplaceIn(d + "/labels.json", "\n  \"供水有限公司\",", ""); },
       "labels.json lists 4 labels for head 'department'"},
      {"labels without a head",
       [](const std::string& d) { Write(d + "/labels.json", R"({"department": ["a"]})"); },
       "has no list for head 'category'"},
      {"labels with an extra head",
       [](const std::string& d) { ReplaceIn(d + "/labels.json", "{", "{\"intent\": [\"x\"], "); },
       "list 'intent' for a head that model.yaml's outputs do not name"},
      {"labels not strings",
       [](const std::string& d) {
         Write(d + "/labels.json", R"({"department": [1, 2], "category": ["a"]})");
       },
       "'department' must be a list of strings"},
      {"labels twice",
       [](const std::string& d) {
         ReplaceIn(d + "/labels.json", "\"供水有限公司\"", "\"市政管理局\"");
       },
       "lists '市政管理局' twice"},
      {"labels not JSON", [](const std::string& d) { Write(d + "/labels.json", "[1,"); },
       "not valid JSON"},
      {"temperature not positive",
       [](const std::string& d) { ReplaceIn(d + "/model.yaml", "category: 0.7", "category: 0"); },
       "calibration.temperature.category must be a positive number"},
      {"temperature of no head",
       [](const std::string& d) { ReplaceIn(d + "/model.yaml", "category: 0.7", "intent: 2"); },
       "calibration.temperature.intent names no head"},
      {"handoff threshold on a classifier",
       [](const std::string& d) {
         ReplaceIn(d + "/model.yaml", "calibration: {", "calibration: {handoff_threshold: 0.5, ");
       },
       "handoff_threshold is for joint models"},
      {"malformed yaml",
       [](const std::string& d) { ReplaceIn(d + "/model.yaml", "outputs: {", "outputs: {{"); },
       "model.yaml"},
      {"top_k zero",
       [](const std::string& d) { ReplaceIn(d + "/model.yaml", "top_k: 4", "top_k: 0"); },
       "top_k must be at least 1"},
  };
  for (const auto& c : cases) {
    const std::string dir = Copy("tiny_classifier", "bad");
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

// The joint model's calibration: calibration.temperature.intent divides the intent logits before
// the softmax; handoff_threshold is read for the dialog. Reference: tiny_reference.json's intent
// logits (PyTorch), softmaxed here at temperature 2.
TEST(JointCalibration, IntentTemperatureAndHandoffThreshold) {
  const std::string dir = Copy("tiny_model", "cal");
  {
    std::ofstream(dir + "/model.yaml", std::ios::app)
        << "calibration: {temperature: {intent: 2.0}, handoff_threshold: 0.45}\n";
  }
  auto p = Pipeline::Open(dir, {});
  ASSERT_TRUE(p->config().handoff_threshold.has_value());
  EXPECT_FLOAT_EQ(*p->config().handoff_threshold, 0.45f);
  std::ifstream in(kFixtures + "tiny_reference.json");
  const auto ref = nlohmann::json::parse(in);
  for (size_t i = 0; i < 6; ++i) {
    const auto logits = ref[i]["intent_logits"].get<std::vector<double>>();
    double mx = -1e30, z = 0;
    for (double v : logits) mx = std::max(mx, v / 2);
    for (double v : logits) z += std::exp(v / 2 - mx);
    const auto u = p->Understand({ref[i]["text"].get<std::string>()}, kNow)[0];
    EXPECT_EQ(u.intent, ref[i]["intent"].get<std::string>());
    const size_t k = std::find(p->labels().intents.begin(), p->labels().intents.end(), u.intent) -
                     p->labels().intents.begin();
    EXPECT_NEAR(u.confidence, std::exp(logits[k] / 2 - mx) / z, 1e-4);
    EXPECT_LT(u.confidence, ref[i]["confidence"].get<double>());  // flatter than at 1
  }
  // Without the key there is no threshold, and confidences are the reference's own.
  auto plain = Pipeline::Open(Copy("tiny_model", "plain"), {});
  EXPECT_FALSE(plain->config().handoff_threshold.has_value());
  const auto u = plain->Understand({ref[0]["text"].get<std::string>()}, kNow)[0];
  EXPECT_NEAR(u.confidence, ref[0]["confidence"].get<double>(), 1e-4);
}

TEST(JointCalibration, BadKeys) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"calibration: {temperature: {slots: 2}}\n", "calibration.temperature.slots names no head"},
      {"calibration: {handoff_threshold: 1.5}\n", "handoff_threshold must be in (0, 1)"},
      {"calibration: {temprature: {intent: 2}}\n", "unknown key 'calibration.temprature'"},
      {"long_text: head_tail\n", "long_text head_tail is for classifier models"},
  };
  for (const auto& [line, want] : cases) {
    const std::string dir = Copy("tiny_model", "badcal");
    std::ofstream(dir + "/model.yaml", std::ios::app) << line;
    try {
      Pipeline::Open(dir, {});
      ADD_FAILURE() << line << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << line << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace hotline::nlu
