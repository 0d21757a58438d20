// Tokenizer unit tests; expected ids and offsets worked out by hand from BERT's rules.
// (Bulk parity with transformers is tokenizer_parity_test.py.)
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <atomic>
#include <thread>

#include "base/error.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace hotline::text {
namespace {

std::shared_ptr<const Vocab> TestVocab() {
  return std::make_shared<const Vocab>(Vocab::FromTokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "你", "好", "un", "##aff", "##able", "a",
       "##a", "e", "é", "caf", "##é", "abc", "1", "##38", ",", "!", "ᄒ", "##ᅡ", "##ᆫ", "138"}));
}

std::vector<std::string> Tokens(const Tokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  for (int id : t.Encode(text).ids) out.push_back(t.vocab().Token(id));
  return out;
}

using V = std::vector<std::string>;
using Spans = std::vector<Span>;

TEST(Utf8, DecodesAndRejectsWithByteOffsets) {
  EXPECT_EQ(DecodeUtf8("a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80"),
            (std::vector<char32_t>{U'a', 0xE9, 0x4F60, 0x1F600}));
  struct Bad {
    std::string s;
    const char* want;
  };
  for (const Bad& b : std::vector<Bad>{{"ab\xFF", "byte 2 (0xFF): invalid lead byte"},
                                       {"\x80", "byte 0 (0x80): unexpected continuation"},
                                       {"x\xC3", "byte 1 (0xC3): sequence cut off"},
                                       {"\xC0\xAF", "overlong"},
                                       {"\xED\xA0\x80", "surrogate"},
                                       {"\xF4\x90\x80\x80", "above U+10FFFF"},
                                       {"\xE4\x41\x41", "missing continuation"}}) {
    try {
      DecodeUtf8(b.s);
      ADD_FAILURE() << "no error for " << b.want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.want), std::string::npos) << e.what();
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
    }
  }
  EXPECT_EQ(CodePointByteOffsets("a\xC3\xA9z"), (std::vector<size_t>{0, 1, 3, 4}));
  EXPECT_EQ(EncodeUtf8({0x4F60, U'x', 0x1F600}), "\xE4\xBD\xA0x\xF0\x9F\x98\x80");
}

TEST(Unicode, ClassesAndNormalisation) {
  EXPECT_EQ(Classify(U'\t'), CharClass::kSpace);
  EXPECT_EQ(Classify(0x3000), CharClass::kSpace);   // ideographic space, Zs
  EXPECT_EQ(Classify(0x2028), CharClass::kSpace);   // str.split() splits on it
  EXPECT_EQ(Classify(0x200B), CharClass::kControl);  // ZERO WIDTH SPACE is Cf
  EXPECT_EQ(Classify(0xE000), CharClass::kControl);  // private use, Co
  EXPECT_EQ(Classify(U'$'), CharClass::kPunct);       // ASCII symbol: punctuation for BERT
  EXPECT_EQ(Classify(0xFF0C), CharClass::kPunct);     // full-width comma
  EXPECT_EQ(Classify(0x00A5), CharClass::kOther);     // ¥ is Sc: not punctuation
  EXPECT_EQ(Classify(0x0301), CharClass::kMn);
  EXPECT_EQ(Classify(0x4E2D), CharClass::kOther);
  EXPECT_TRUE(IsChineseChar(0x4E2D));
  EXPECT_TRUE(IsChineseChar(0x20000));
  EXPECT_FALSE(IsChineseChar(0x3042));  // hiragana
  char32_t low[2];
  ASSERT_EQ(Lower(0x130, low), 2);
  EXPECT_EQ(low[0], U'i');
  EXPECT_EQ(low[1], char32_t(0x307));
  ASSERT_EQ(Lower(0x3A3, low), 1);  // Σ → σ (per character: no final sigma)
  EXPECT_EQ(low[0], char32_t(0x3C3));
  ASSERT_EQ(Lower(0x212A, low), 1);  // KELVIN SIGN → k
  EXPECT_EQ(low[0], U'k');
  std::vector<Char> s = {{U'e', 0, 1}, {0x323, 1, 2}, {0x301, 2, 3}, {0xD55C, 3, 4}};
  ToNfc(&s);  // e + dot below + acute → U+1EB9 U+0301 (ẹ́); 한 stays
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].cp, char32_t(0x1EB9));
  EXPECT_EQ(s[0].start, 0);
  EXPECT_EQ(s[0].end, 2);
  EXPECT_EQ(s[1].cp, char32_t(0x301));
  EXPECT_EQ(s[2].cp, char32_t(0xD55C));
  ToNfd(&s);  // ẹ́ → e U+0323 U+0301; 한 → ᄒ ᅡ ᆫ, all from code point 3
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s[3].cp, char32_t(0x1112));
  EXPECT_EQ(s[5].cp, char32_t(0x11AB));
  EXPECT_EQ(s[5].start, 3);
}

TEST(Tokenizer, ChineseWordPieceAndOffsets) {
  Tokenizer t(TestVocab(), {});
  auto e = t.Encode("你好 unaffable!");
  EXPECT_EQ(Tokens(t, "你好 unaffable!"),
            (V{"[CLS]", "你", "好", "un", "##aff", "##able", "!", "[SEP]"}));
  EXPECT_EQ(e.offsets, (Spans{{0, 0}, {0, 1}, {1, 2}, {3, 5}, {5, 8}, {8, 12}, {12, 13}, {0, 0}}));
  EXPECT_FALSE(e.truncated);
  EXPECT_EQ(e.num_chars, 13);
  // No piece for "unx" after "un": the whole word is [UNK], spanning the word.
  e = t.Encode(" unx,");
  EXPECT_EQ(Tokens(t, " unx,"), (V{"[CLS]", "[UNK]", ",", "[SEP]"}));
  EXPECT_EQ(e.offsets[1], (Span{1, 4}));
}

TEST(Tokenizer, LowerCaseStripsAccentsAndControl) {
  Tokenizer lower(TestVocab(), {});
  // Lower-casing strips the accent: "Café" → "cafe", and the vocabulary has "caf" but no "##e".
  EXPECT_EQ(Tokens(lower, "Café"), (V{"[CLS]", "[UNK]", "[SEP]"}));
  EXPECT_EQ(Tokens(lower, "É"), (V{"[CLS]", "e", "[SEP]"}));
  // Control characters vanish, U+0000 and U+FFFD too; tabs split words.
  EXPECT_EQ(Tokens(lower, "a\x01" "a\tA\xEF\xBF\xBD" "A"), (V{"[CLS]", "a", "##a", "a", "##a", "[SEP]"}));
  auto e = lower.Encode("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");  // decomposed 한: jamo pieces
  EXPECT_EQ(e.offsets, (Spans{{0, 0}, {0, 1}, {1, 2}, {2, 3}, {0, 0}}));

  TokenizerOptions keep;
  keep.lowercase = false;
  Tokenizer cased(TestVocab(), keep);
  EXPECT_EQ(Tokens(cased, "café"), (V{"[CLS]", "caf", "##é", "[SEP]"}));
  // Decomposed "cafe\u0301" is composed (NFC) first: same pieces, "##é" spans both code points.
  e = cased.Encode("cafe\xCC\x81");
  EXPECT_EQ(e.ids, cased.Encode("café").ids);
  EXPECT_EQ(e.offsets[2], (Span{3, 5}));
}

TEST(Tokenizer, WidthFoldingKeepsOffsets) {
  TokenizerOptions o;
  o.normalize_width = true;
  Tokenizer t(TestVocab(), o);
  const std::string text = "\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3\xE3\x80\x80\xEF\xBC\x91\xEF\xBC\x93\xEF\xBC\x98";  // ＡＢＣ　１３８
  auto e = t.Encode(text);
  EXPECT_EQ(Tokens(t, text), (V{"[CLS]", "abc", "138", "[SEP]"}));
  EXPECT_EQ(e.offsets, (Spans{{0, 0}, {0, 3}, {4, 7}, {0, 0}}));
  Tokenizer plain(TestVocab(), {});
  EXPECT_EQ(Tokens(plain, text), (V{"[CLS]", "[UNK]", "[UNK]", "[SEP]"}));
}

TEST(Tokenizer, LongWordsAndTruncation) {
  Tokenizer t(TestVocab(), {});
  const std::string w100(100, 'a'), w101(101, 'a');
  auto e = t.Encode(w100);
  ASSERT_EQ(e.ids.size(), 102u);  // a ##a × 99
  EXPECT_EQ(e.offsets[100], (Span{99, 100}));
  e = t.Encode(w101 + " a");
  EXPECT_EQ(Tokens(t, w101 + " a"), (V{"[CLS]", "[UNK]", "a", "[SEP]"}));
  EXPECT_EQ(e.offsets[1], (Span{0, 101}));

  TokenizerOptions o;
  o.max_length = 4;
  Tokenizer small(TestVocab(), o);
  e = small.Encode("你好你");
  EXPECT_EQ(Tokens(small, "你好你"), (V{"[CLS]", "你", "好", "[SEP]"}));
  EXPECT_TRUE(e.truncated);
  e = small.Encode("你好  \x01 ");  // exactly fits; what follows gives no tokens
  EXPECT_FALSE(e.truncated);
  o.max_length = 1;
  EXPECT_THROW(Tokenizer(TestVocab(), o), Error);
}

TEST(Tokenizer, SpecialLiteralsAndEmpty) {
  Tokenizer t(TestVocab(), {});
  auto e = t.Encode("a[MASK]");
  EXPECT_EQ(Tokens(t, "a[MASK]"), (V{"[CLS]", "a", "[MASK]", "[SEP]"}));
  EXPECT_EQ(e.offsets[2], (Span{1, 7}));
  EXPECT_EQ(t.Encode("").ids.size(), 2u);
  EXPECT_EQ(t.Encode(" \t\xE3\x80\x80").ids.size(), 2u);
  EXPECT_THROW(t.Encode("ok\xFF"), Error);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  Tokenizer t(TestVocab(), {});
  const auto want = t.Encode("你好 unaffable café 138").ids;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i)
        if (t.Encode("你好 unaffable café 138").ids != want) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Vocab, FileFormatAndErrors) {
  const std::string path = ::testing::TempDir() + "/hotline_vocab_test.txt";
  {
    std::ofstream f(path, std::ios::binary);
    f << "[PAD]\r\n[UNK]\r[CLS]\n[SEP]\nx\nx";  // mixed line ends; no final newline; x twice
  }
  Vocab v = Vocab::Load(path);
  EXPECT_EQ(v.size(), 6);
  EXPECT_EQ(v.Find("[CLS]"), 2);
  EXPECT_EQ(v.Find("x"), 5);  // the last one wins, as in transformers
  EXPECT_EQ(v.pad_id(), 0);
  {
    std::ofstream f(path, std::ios::binary);
    f << "[PAD]\n[CLS]\n[SEP]\n";
  }
  try {
    Vocab::Load(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks one of [UNK]"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(path, std::ios::binary);
    f << "[UNK]\n[CLS]\n[SEP]\n\xFF\n";
  }
  EXPECT_THROW(Vocab::Load(path), Error);
  std::remove(path.c_str());
  try {
    Vocab::Load(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kNotFound);
  }
}

}  // namespace
}  // namespace hotline::text
