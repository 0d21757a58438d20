#include "nlu/classifier_eval.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace hotline::nlu {

std::vector<ClassifierExample> ReadClassifierData(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open data file '" + path + "'", Code::kNotFound);
  std::vector<ClassifierExample> out;
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      ClassifierExample e;
      e.text = j.at("text").get<std::string>();
      e.label = j.at("label").get<std::string>();
      if (j.contains("category") && !j["category"].is_null()) {
        e.category = j["category"].get<std::string>();
      } else {  // cat1..cat4, "/"-joined, trailing empty levels dropped
        std::vector<std::string> parts;
        for (int k = 1; k <= 4; ++k) {
          const std::string key = "cat" + std::to_string(k);
          parts.push_back(j.contains(key) && !j[key].is_null() ? j[key].get<std::string>() : "");
        }
        while (!parts.empty() && parts.back().empty()) parts.pop_back();
        for (size_t k = 0; k < parts.size(); ++k) e.category += (k ? "/" : "") + parts[k];
      }
      out.push_back(std::move(e));
    } catch (const std::exception& ex) {
      throw Error(path + ":" + std::to_string(no) +
                  ": expected {\"text\", \"label\", \"category\" (optional)}: " + ex.what());
    }
  }
  if (out.empty()) throw Error("data file '" + path + "' holds no labelled orders");
  return out;
}

namespace {
double Ratio(int a, int b) { return b > 0 ? double(a) / b : 0.0; }
}  // namespace

double ClassifierScores::department_accuracy() const { return Ratio(department_top1, n); }
double ClassifierScores::department_top3_accuracy() const { return Ratio(department_top3, n); }
double ClassifierScores::category_accuracy() const {
  return Ratio(category_correct, category_n);
}
double ClassifierScores::category_level1_accuracy() const {
  return Ratio(category_level1_correct, category_n);
}

ClassifierScores ScoreClassifier(Pipeline& pipeline, const std::vector<ClassifierExample>& data,
                                 int batch) {
  const ModelConfig& config = pipeline.config();
  if (config.kind != "classifier")
    throw Error("model '" + config.name + "' is a " + config.kind +
                " model; classifier scoring needs kind: classifier");
  int dept = -1, cat = -1;
  for (size_t h = 0; h < config.heads.size(); ++h) {
    if (config.heads[h].name == "department") dept = int(h);
    if (config.heads[h].name == "category") cat = int(h);
  }
  if (dept < 0) throw Error("model '" + config.name + "' has no head named 'department'");
  ClassifierScores s;
  const auto start = std::chrono::steady_clock::now();
  for (size_t a = 0; a < data.size(); a += size_t(std::max(1, batch))) {
    const size_t b = std::min(data.size(), a + size_t(std::max(1, batch)));
    std::vector<std::string> texts;
    for (size_t i = a; i < b; ++i) texts.push_back(data[i].text);
    auto got = pipeline.Understand(texts, std::chrono::system_clock::now());
    for (size_t i = a; i < b; ++i) s.predictions.push_back(std::move(got[i - a]));
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < data.size(); ++i) {
    const ClassifierExample& e = data[i];
    const HeadResult& d = s.predictions[i].heads.at(dept);
    ++s.n;
    ++s.per_department[e.label].n;
    ++s.per_department[d.label].predicted;
    if (d.label == e.label) {
      ++s.department_top1;
      ++s.per_department[e.label].correct;
    } else {
      ++s.confusions[{e.label, d.label}];
    }
    for (size_t k = 0; k < d.top_k.size() && k < 3; ++k) {
      if (d.top_k[k].label == e.label) {
        ++s.department_top3;
        break;
      }
    }
    if (!e.category.empty()) {
      if (cat < 0)
        throw Error("the data has categories but model '" + config.name +
                    "' has no head named 'category'");
      ++s.category_n;
      const std::string& got = s.predictions[i].heads.at(cat).label;
      s.category_correct += got == e.category;
      s.category_level1_correct +=
          got.substr(0, got.find('/')) == e.category.substr(0, e.category.find('/'));
    }
  }
  return s;
}

}  // namespace hotline::nlu
