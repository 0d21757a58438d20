#include "text/tokenizer.h"

#include <algorithm>
#include <array>

#include "base/error.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace hotline::text {
namespace {

constexpr int kMaxWordChars = 100;  // WordpieceTokenizer.max_input_chars_per_word

// BertTokenizer's special tokens, as transformers matches them in the text.
constexpr std::array<std::u32string_view, 5> kSpecialLiterals = {U"[UNK]", U"[SEP]", U"[PAD]",
                                                                 U"[CLS]", U"[MASK]"};

char32_t FoldWidth(char32_t cp) {
  if (cp >= 0xFF01 && cp <= 0xFF5E) return cp - 0xFEE0;
  if (cp == 0x3000) return 0x20;
  return cp;
}

// Collects tokens until the budget is full; then only notes that more came.
struct Sink {
  Encoding* enc;
  size_t budget;
  bool full() const { return enc->ids.size() >= budget; }
  // Full and something was dropped: nothing more to learn from the rest of the text.
  bool done() const { return enc->truncated; }
  void Add(int id, int start, int end) {
    if (full()) {
      enc->truncated = true;
      return;
    }
    enc->ids.push_back(id);
    enc->offsets.push_back({start, end});
  }
};

class Run {
 public:
  Run(const Vocab& vocab, const TokenizerOptions& opts, Sink* sink)
      : vocab_(vocab), opts_(opts), sink_(sink) {}

  // Text segment [a, b) of the (width-folded) text, holding no special literal.
  void Segment(const std::vector<char32_t>& text, int a, int b) {
    chars_.clear();
    bool normalize = false;
    for (int i = a; i < b; ++i) {
      char32_t lowered[2] = {text[i], 0};
      const int n = opts_.lowercase ? Lower(text[i], lowered) : 1;
      for (int k = 0; k < n; ++k) {
        const char32_t cp = lowered[k];
        if (cp == 0 || cp == 0xFFFD) continue;
        const CharClass cls = Classify(cp);
        if (cls == CharClass::kControl) continue;
        if (cls == CharClass::kSpace) {
          chars_.push_back({U' ', i, i + 1});
        } else if (IsChineseChar(cp)) {
          chars_.push_back({U' ', i, i});
          chars_.push_back({cp, i, i + 1});
          chars_.push_back({U' ', i, i});
        } else {
          chars_.push_back({cp, i, i + 1});
        }
        normalize = normalize || MayNormalize(cp);
      }
    }
    // BertTokenizer applies NFC here. When lower-casing, each word is decomposed (NFD) right
    // after, and NFD(NFC(x)) == NFD(x), so NFC is skipped: same ids, and each decomposed piece
    // keeps its own source character's offsets (as BertTokenizerFast reports them).
    if (normalize && !opts_.lowercase) ToNfc(&chars_);
    // Words: maximal runs of non-space characters.
    size_t i = 0;
    while (i < chars_.size() && !sink_->done()) {
      if (chars_[i].cp == U' ' || Classify(chars_[i].cp) == CharClass::kSpace) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < chars_.size() && chars_[j].cp != U' ' &&
             Classify(chars_[j].cp) != CharClass::kSpace)
        ++j;
      Word(i, j);
      i = j;
    }
  }

 private:
  void Word(size_t a, size_t b) {
    word_.assign(chars_.begin() + a, chars_.begin() + b);
    if (opts_.special_literals && IsSpecialLiteral(word_)) {
      // BasicTokenizer leaves never_split words whole; WordPiece then finds them.
      WordPiece(word_.data(), word_.size());
      return;
    }
    if (opts_.lowercase) {  // _run_strip_accents: NFD, then drop Mn
      bool decompose = false;
      for (const Char& c : word_) decompose = decompose || MayNormalize(c.cp);
      if (decompose) ToNfd(&word_);
      std::erase_if(word_, [](const Char& c) { return Classify(c.cp) == CharClass::kMn; });
    }
    // _run_split_on_punc: every punctuation character is a word of its own.
    size_t i = 0;
    while (i < word_.size()) {
      if (Classify(word_[i].cp) == CharClass::kPunct) {
        WordPiece(&word_[i], 1);
        ++i;
        continue;
      }
      size_t j = i;
      while (j < word_.size() && Classify(word_[j].cp) != CharClass::kPunct) ++j;
      WordPiece(&word_[i], j - i);
      i = j;
    }
  }

  static bool IsSpecialLiteral(const std::vector<Char>& w) {
    if (w.size() < 5 || w.size() > 6 || w[0].cp != U'[') return false;
    for (std::u32string_view lit : kSpecialLiterals) {
      if (lit.size() != w.size()) continue;
      bool same = true;
      for (size_t k = 0; k < lit.size() && same; ++k) same = w[k].cp == lit[k];
      if (same) return true;
    }
    return false;
  }

  static Span SpanOf(const Char* c, size_t n) {
    Span s{c[0].start, c[0].end};
    for (size_t k = 1; k < n; ++k) {
      s.start = std::min(s.start, c[k].start);
      s.end = std::max(s.end, c[k].end);
    }
    return s;
  }

  // Greedy longest-match-first over one word of n characters.
  void WordPiece(const Char* c, size_t n) {
    if (n == 0) return;
    if (n > size_t(kMaxWordChars)) {
      const Span s = SpanOf(c, n);
      sink_->Add(vocab_.unk_id(), s.start, s.end);
      return;
    }
    utf8_.clear();
    byte_at_.clear();
    for (size_t k = 0; k < n; ++k) {
      byte_at_.push_back(utf8_.size());
      AppendUtf8(c[k].cp, &utf8_);
    }
    byte_at_.push_back(utf8_.size());
    pieces_.clear();
    size_t start = 0;
    while (start < n) {
      size_t end = std::min(n, start + size_t(vocab_.max_token_chars()));
      int id = -1;
      for (; end > start; --end) {
        std::string_view piece(utf8_.data() + byte_at_[start], byte_at_[end] - byte_at_[start]);
        if (start == 0) {
          id = vocab_.Find(piece);
        } else {
          scratch_.assign("##");
          scratch_.append(piece);
          id = vocab_.Find(scratch_);
        }
        if (id >= 0) break;
      }
      if (id < 0) {  // the whole word is unknown
        const Span s = SpanOf(c, n);
        sink_->Add(vocab_.unk_id(), s.start, s.end);
        return;
      }
      const Span s = SpanOf(c + start, end - start);
      pieces_.push_back({id, s});
      start = end;
    }
    for (const auto& [id, s] : pieces_) sink_->Add(id, s.start, s.end);
  }

  const Vocab& vocab_;
  const TokenizerOptions& opts_;
  Sink* sink_;
  std::vector<Char> chars_, word_;
  std::string utf8_, scratch_;
  std::vector<size_t> byte_at_;
  std::vector<std::pair<int, Span>> pieces_;
};

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Vocab> vocab, TokenizerOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  HOTLINE_CHECK_ARG(vocab_ != nullptr, "tokenizer needs a vocabulary");
  const int min_len = options_.add_special_tokens ? 2 : 1;
  if (options_.max_length < min_len) {
    throw Error("tokenizer max_length must be at least " + std::to_string(min_len) + ", got " +
                std::to_string(options_.max_length));
  }
}

Encoding Tokenizer::Encode(std::string_view utf8) const {
  std::vector<char32_t> text;
  DecodeUtf8(utf8, &text);
  return Encode(text);
}

Encoding Tokenizer::Encode(const std::vector<char32_t>& original) const {
  Encoding enc;
  enc.num_chars = int(original.size());
  const bool specials = options_.add_special_tokens;
  if (specials) enc.ids.reserve(std::min<size_t>(original.size() + 2, options_.max_length));
  Sink sink{&enc, size_t(options_.max_length - (specials ? 2 : 0))};
  if (specials) sink.Add(vocab_->cls_id(), 0, 0), sink.budget += 1;

  std::vector<char32_t> folded;
  const std::vector<char32_t>* text = &original;
  if (options_.normalize_width) {
    folded.resize(original.size());
    std::transform(original.begin(), original.end(), folded.begin(), FoldWidth);
    text = &folded;
  }
  Run run(*vocab_, options_, &sink);
  const int n = int(text->size());
  int seg = 0;
  for (int i = 0; i < n && !sink.done(); ++i) {
    if (!options_.special_literals || (*text)[i] != U'[') continue;
    for (std::u32string_view lit : kSpecialLiterals) {
      if (i + int(lit.size()) > n ||  // NOLINT
          !std::equal(lit.begin(), lit.end(), text->begin() + i))
        continue;
      run.Segment(*text, seg, i);
      std::string lit8;
      for (char32_t cp : lit) AppendUtf8(cp, &lit8);
      const int id = vocab_->Find(lit8);
      sink.Add(id >= 0 ? id : vocab_->unk_id(), i, i + int(lit.size()));
      i += int(lit.size()) - 1;
      seg = i + 1;
      break;
    }
  }
  if (!sink.done()) run.Segment(*text, seg, n);
  if (specials) {
    enc.ids.push_back(vocab_->sep_id());
    enc.offsets.push_back({0, 0});
  }
  return enc;
}

}  // namespace hotline::text
