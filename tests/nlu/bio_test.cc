// BIO decoding and span mapping, table-driven; expected spans worked out by hand.
#include "nlu/bio.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "text/utf8.h"

namespace hotline::nlu {
namespace {

// Tags: 0 O, 1 B-a, 2 I-a, 3 B-b, 4 I-b. Type 0 = a, 1 = b.
const TagSet& Tags() {
  static const TagSet tags({"O", "B-a", "I-a", "B-b", "I-b"});
  return tags;
}

struct BioCase {
  const char* name;
  std::vector<int> tags;
  std::vector<TokenSpan> want;
};

TEST(Bio, DecodeTable) {
  const std::vector<BioCase> cases = {
      {"empty", {}, {}},
      {"all O", {0, 0, 0}, {}},
      {"one span", {0, 1, 2, 2, 0}, {{0, 1, 3}}},
      {"B at end", {0, 0, 1}, {{0, 2, 2}}},
      {"two adjacent B", {1, 1}, {{0, 0, 0}, {0, 1, 1}}},
      {"B then I of other type", {1, 4, 4}, {{0, 0, 0}, {1, 1, 2}}},
      {"I without B is repaired", {0, 2, 2, 0}, {{0, 1, 2}}},
      {"I at start", {4, 0}, {{1, 0, 0}}},
      {"I after O after span", {1, 2, 0, 2}, {{0, 0, 1}, {0, 3, 3}}},
      {"type switch mid-span", {1, 2, 4, 2}, {{0, 0, 1}, {1, 2, 2}, {0, 3, 3}}},
      {"B inside span starts new", {3, 4, 3, 4}, {{1, 0, 1}, {1, 2, 3}}},
  };
  for (const auto& c : cases) EXPECT_EQ(DecodeBio(Tags(), c.tags), c.want) << c.name;
  EXPECT_THROW(DecodeBio(Tags(), {0, 7}), Error);
  EXPECT_THROW(TagSet({"O", "X-a"}), Error);
  EXPECT_THROW(TagSet({"O", "B-"}), Error);
  EXPECT_EQ(Tags().type_names(), (std::vector<std::string>{"a", "b"}));
}

struct SpanCase {
  const char* name;
  std::string text;
  std::vector<text::Span> offsets;  // per token
  std::vector<TokenSpan> spans;
  std::vector<CharSpan> want;
};

TEST(Bio, CharSpansTrimAndNeverOverlap) {
  const std::vector<SpanCase> cases = {
      {"plain", "朝阳区建国路", {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}},
       {{0, 0, 2}, {1, 3, 5}}, {{0, 0, 3}, {1, 3, 6}}},
      {"punctuation trimmed", "“京A1”。", {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}},
       {{0, 0, 5}}, {{0, 1, 4}}},
      {"whitespace trimmed", " ab  c ", {{1, 3}, {5, 6}}, {{0, 0, 1}}, {{0, 1, 6}}},
      {"only punctuation: dropped", "，。xy", {{0, 1}, {1, 2}, {2, 3}, {3, 4}},
       {{0, 0, 1}, {1, 2, 3}}, {{1, 2, 4}}},
      {"shared characters: cut, never overlapping", "한국어요", {{0, 2}, {1, 3}, {2, 4}},
       {{0, 0, 0}, {1, 1, 2}}, {{0, 0, 2}, {1, 2, 4}}},
      {"fully shared: second dropped", "한국", {{0, 2}, {0, 2}}, {{0, 0, 0}, {1, 1, 1}},
       {{0, 0, 2}}},
      // kMinSpanChars: no slot value is one character long; the Python decoder agrees.
      {"one character: dropped", "千恩万谢", {{0, 1}, {1, 2}, {2, 3}, {3, 4}},
       {{0, 2, 2}, {1, 3, 3}}, {}},
      {"trimmed to one character: dropped", "，万。好吗", {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}},
       {{0, 0, 2}, {1, 3, 4}}, {{1, 3, 5}}},
      {"cut to one character after the previous span: dropped", "abc", {{0, 2}, {1, 3}},
       {{0, 0, 0}, {1, 1, 1}}, {{0, 0, 2}}},
      {"ASCII symbols are punctuation for BERT", "$100#", {{0, 1}, {1, 4}, {4, 5}},
       {{0, 0, 2}}, {{0, 1, 4}}},
  };
  for (const auto& c : cases) {
    const auto cps = text::DecodeUtf8(c.text);
    EXPECT_EQ(ToCharSpans(c.spans, c.offsets, cps), c.want) << c.name;
  }
  EXPECT_THROW(ToCharSpans({{0, 0, 5}}, {{0, 1}}, text::DecodeUtf8("a")), Error);
}

}  // namespace
}  // namespace hotline::nlu
