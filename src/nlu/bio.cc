#include "nlu/bio.h"

#include <algorithm>

#include "base/error.h"
#include "text/unicode.h"

namespace hotline::nlu {

TagSet::TagSet(const std::vector<std::string>& tags) {
  for (const std::string& t : tags) {
    if (t == "O") {
      kinds_.push_back(Kind::kO);
      types_.push_back(-1);
      continue;
    }
    if (t.size() < 3 || (t[0] != 'B' && t[0] != 'I') || t[1] != '-')
      throw Error("slot tag '" + t + "' is not O, B-<type> or I-<type>");
    const std::string type = t.substr(2);
    auto it = std::find(type_names_.begin(), type_names_.end(), type);
    if (it == type_names_.end()) it = type_names_.insert(type_names_.end(), type);
    kinds_.push_back(t[0] == 'B' ? Kind::kB : Kind::kI);
    types_.push_back(int(it - type_names_.begin()));
  }
}

std::vector<TokenSpan> DecodeBio(const TagSet& tags, const std::vector<int>& tag_ids) {
  std::vector<TokenSpan> spans;
  bool open = false;
  for (int i = 0; i < int(tag_ids.size()); ++i) {
    const int tag = tag_ids[i];
    if (tag < 0 || tag >= tags.size())
      throw Error("slot tag id " + std::to_string(tag) + " outside the " +
                  std::to_string(tags.size()) + " tags", Code::kInternal);
    switch (tags.kind(tag)) {
      case TagSet::Kind::kO:
        open = false;
        break;
      case TagSet::Kind::kB:
        spans.push_back({tags.type(tag), i, i});
        open = true;
        break;
      case TagSet::Kind::kI:
        if (open && spans.back().type == tags.type(tag)) {
          spans.back().last = i;
        } else {  // repair: an I- without its B- starts the span
          spans.push_back({tags.type(tag), i, i});
          open = true;
        }
        break;
    }
  }
  return spans;
}

std::vector<CharSpan> ToCharSpans(const std::vector<TokenSpan>& spans,
                                  const std::vector<text::Span>& token_offsets,
                                  const std::vector<char32_t>& text) {
  auto trimmable = [&](int i) {
    const text::CharClass c = text::Classify(text[i]);
    return c == text::CharClass::kSpace || c == text::CharClass::kPunct ||
           c == text::CharClass::kControl;
  };
  std::vector<CharSpan> out;
  int prev_end = 0;
  for (const TokenSpan& s : spans) {
    if (s.first < 0 || s.last >= int(token_offsets.size()) || s.first > s.last)
      throw Error("token span outside the tokens", Code::kInternal);
    int start = token_offsets[s.first].start, end = token_offsets[s.first].end;
    for (int k = s.first + 1; k <= s.last; ++k) {
      start = std::min(start, token_offsets[k].start);
      end = std::max(end, token_offsets[k].end);
    }
    start = std::max(start, prev_end);
    end = std::min(end, int(text.size()));
    while (start < end && trimmable(start)) ++start;
    while (end > start && trimmable(end - 1)) --end;
    if (end - start < kMinSpanChars) continue;
    out.push_back({s.type, start, end});
    prev_end = end;
  }
  return out;
}

}  // namespace hotline::nlu
