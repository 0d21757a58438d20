// BIO slot decoding: per-token tags → non-overlapping character spans in the original text.
#pragma once

#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace hotline::nlu {

// A tag set "O", "B-x", "I-x", ... parsed once. Throws hotline::Error on a tag that is neither
// "O" nor "B-"/"I-" plus a non-empty type.
class TagSet {
 public:
  explicit TagSet(const std::vector<std::string>& tags);
  enum class Kind { kO, kB, kI };
  int size() const { return int(kinds_.size()); }
  Kind kind(int tag) const { return kinds_.at(tag); }
  int type(int tag) const { return types_.at(tag); }  // index into type_names(), -1 for O
  const std::vector<std::string>& type_names() const { return type_names_; }

 private:
  std::vector<Kind> kinds_;
  std::vector<int> types_;
  std::vector<std::string> type_names_;
};

// A decoded span over tokens [first, last] (inclusive) with a slot type index.
struct TokenSpan {
  int type = -1;
  int first = 0, last = 0;
  bool operator==(const TokenSpan&) const = default;
};

// tags: one tag id per token (the caller leaves out [CLS]/[SEP]). An I-x that does not continue
// an x span starts one (repair); B-x always starts a new span; O ends the current one. Spans are
// in order and never share a token.
std::vector<TokenSpan> DecodeBio(const TagSet& tags, const std::vector<int>& tag_ids);

// Spans shorter than this many code points (after trimming) are dropped: no slot value is one
// character long, and single characters a model tags inside running text (万 in 千恩万谢) were
// half of the false positives of the first default model. training/common.py (MIN_SPAN_CHARS)
// decodes the same way, so `hotline eval` reproduces the Python figures.
inline constexpr int kMinSpanChars = 2;

// Code-point span [start, end) of the original text for token spans, trimmed of whitespace,
// punctuation and control characters at both ends. Spans that come out shorter than
// kMinSpanChars are dropped; a span that would start inside the previous kept one (tokens that
// share characters, e.g. pieces of one decomposed character) is cut to begin after it, so
// results never overlap.
struct CharSpan {
  int type = -1;
  int start = 0, end = 0;
  bool operator==(const CharSpan&) const = default;
};
std::vector<CharSpan> ToCharSpans(const std::vector<TokenSpan>& spans,
                                  const std::vector<text::Span>& token_offsets,
                                  const std::vector<char32_t>& text);

}  // namespace hotline::nlu
