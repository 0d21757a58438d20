// BERT WordPiece tokenizer with code-point offsets into the original text.
//
// With normalize_width off it gives exactly the ids of transformers' slow
// BertTokenizer(vocab, do_lower_case=lowercase) called as tokenizer(text, truncation=True,
// max_length=max_length): per-character lower-casing (str.lower) outside special-token literals,
// "[CLS]"/"[SEP]"/"[UNK]"/"[PAD]"/"[MASK]" written in the text kept as those tokens, control
// characters, U+0000 and U+FFFD dropped, whitespace split, each CJK ideograph its own word, NFC,
// accents stripped (NFD, drop Mn) when lower-casing, punctuation split, greedy longest-match-first
// WordPiece with "##" continuations, [UNK] for a word that cannot be pieced or is longer than 100
// code points, [CLS] ... [SEP] around it all.
//
// normalize_width first folds full-width forms U+FF01..U+FF5E to ASCII and U+3000 to a space
// (one code point for one, so offsets are unchanged): BertTokenizer applied to the folded text.
//
// Offsets: token i stands for code points [offsets[i].start, offsets[i].end) of the original text;
// [CLS] and [SEP] get [0, 0) as in BertTokenizerFast's offset_mapping.
//
// Thread-safe: Encode() is const and keeps no state between calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/vocab.h"

namespace hotline::text {

struct TokenizerOptions {
  bool lowercase = true;          // do_lower_case (and accent stripping)
  bool normalize_width = false;   // fold U+FF01..U+FF5E and U+3000 first
  int max_length = 512;           // tokens including [CLS] and [SEP]; at least 2
  bool add_special_tokens = true;  // [CLS] ... [SEP]
  // "[SEP]" etc. written in the text become those tokens, as in transformers (its default
  // split_special_tokens=False). Off: such text is tokenized like any other.
  bool special_literals = true;
};

struct Span {
  int32_t start = 0, end = 0;  // code points, end exclusive
  bool operator==(const Span&) const = default;
};

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<Span> offsets;  // one per id
  bool truncated = false;     // tokens were dropped to fit max_length
  int num_chars = 0;          // code points in the original text
};

class Tokenizer {
 public:
  // Throws hotline::Error when max_length < 2 (with special tokens) or < 1.
  Tokenizer(std::shared_ptr<const Vocab> vocab, TokenizerOptions options);

  // Throws hotline::Error(kInvalidArgument) on invalid UTF-8.
  Encoding Encode(std::string_view utf8) const;
  Encoding Encode(const std::vector<char32_t>& text) const;

  const Vocab& vocab() const { return *vocab_; }
  const TokenizerOptions& options() const { return options_; }

 private:
  std::shared_ptr<const Vocab> vocab_;
  TokenizerOptions options_;
};

}  // namespace hotline::text
