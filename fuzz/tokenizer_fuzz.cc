// libFuzzer target: UTF-8 decoding, the WordPiece tokenizer (lowercasing, accent stripping, width
// folding, special literals) and the PII masking of echoed input, on arbitrary bytes. The first
// byte picks the tokenizer options; the rest is the text. Errors must be hotline::Error; the
// invariants below must hold for every accepted text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "base/echo.h"
#include "base/error.h"
#include "base/pii.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

using namespace hotline::text;

std::shared_ptr<const Vocab> FuzzVocab() {
  static const auto v = std::make_shared<const Vocab>(Vocab::FromTokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "我", "家", "楼", "下", "装", "修", "吵",
       "12", "##34", "##5", "call", "##ing", "a", "##b", "e", "é", ",", ".", "!", "hotline"}));
  return v;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const bool valid = Utf8Problem(text).empty();
  try {
    const std::vector<char32_t> cps = DecodeUtf8(text);
    Check(valid, "DecodeUtf8 accepted what Utf8Problem refused");
    Check(EncodeUtf8(cps) == text, "UTF-8 round trip");
    Check(CodePointByteOffsets(text).size() == cps.size() + 1, "byte offsets size");
  } catch (const hotline::Error&) {
    Check(!valid, "DecodeUtf8 refused what Utf8Problem accepted");
  }

  TokenizerOptions o;
  o.lowercase = flags & 1;
  o.normalize_width = flags & 2;
  o.special_literals = flags & 4;
  o.add_special_tokens = flags & 8;
  o.max_length = 2 + (flags >> 4) * 4;
  const Tokenizer tok(FuzzVocab(), o);
  try {
    const Encoding e = tok.Encode(text);
    Check(valid, "Encode accepted invalid UTF-8");
    Check(e.ids.size() == e.offsets.size(), "one offset per id");
    Check(int(e.ids.size()) <= o.max_length, "max_length");
    for (size_t k = 0; k < e.ids.size(); ++k) {
      Check(e.ids[k] >= 0 && e.ids[k] < tok.vocab().size(), "id in the vocabulary");
      Check(e.offsets[k].start >= 0 && e.offsets[k].start <= e.offsets[k].end &&
                e.offsets[k].end <= e.num_chars,
            "offsets inside the text");
    }
  } catch (const hotline::Error&) {
    Check(!valid, "Encode refused valid UTF-8");
  }

  const std::string masked = hotline::MaskPii(text);
  const std::string echoed = hotline::EchoInput(text);
  Check(echoed.size() <= 4 * 64 + 64, "EchoInput is bounded");
  (void)masked;
  return 0;
}
