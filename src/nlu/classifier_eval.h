// Scoring a classifier model folder (kind: classifier) on labelled orders, for `hotline eval` and
// the bench: department top-1 and top-3 accuracy, category accuracy on the lines that carry one,
// per-department counts and the most frequent confusions.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nlu/pipeline.h"

namespace hotline::nlu {

// One JSON line: {"text", "label" (the department), "category" (optional, the "/"-joined path,
// or its levels as "cat1".."cat4")}.
struct ClassifierExample {
  std::string text, label, category;  // category "" when the line has none
};
// Throws hotline::Error naming the file and line on malformed input, and on an empty file.
std::vector<ClassifierExample> ReadClassifierData(const std::string& path);

struct ClassifierScores {
  struct LabelStats { int n = 0, correct = 0, predicted = 0; };
  int n = 0, department_top1 = 0, department_top3 = 0, category_n = 0, category_correct = 0;
  int category_level1_correct = 0;  // the path's first level right
  double seconds = 0;
  std::vector<Understanding> predictions;  // per example, input order
  std::map<std::string, LabelStats> per_department;
  std::map<std::pair<std::string, std::string>, int> confusions;  // (gold, predicted) → count

  double department_accuracy() const;
  double department_top3_accuracy() const;
  double category_accuracy() const;  // over the examples with a category; 0 when none has one
  double category_level1_accuracy() const;
};

// Runs the pipeline (a classifier with a "department" head; top-3 needs its top_k >= 3) over the
// data in batches. Throws hotline::Error when the model is no classifier or lacks the heads.
ClassifierScores ScoreClassifier(Pipeline& pipeline, const std::vector<ClassifierExample>& data,
                                 int batch = 32);

}  // namespace hotline::nlu
