#include "text/vocab.h"

#include <fstream>
#include <sstream>

#include "base/error.h"
#include "text/utf8.h"

namespace hotline::text {

Vocab Vocab::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open vocabulary file '" + path + "'", Code::kNotFound);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  if (std::string problem = Utf8Problem(data); !problem.empty())
    throw Error("vocabulary file '" + path + "': " + problem);
  std::vector<std::string> tokens;
  // Python's universal newlines: \n, \r\n and \r all end a line; a last line without one counts.
  size_t i = 0, begin = 0;
  while (i < data.size()) {
    if (data[i] == '\n' || data[i] == '\r') {
      tokens.emplace_back(data, begin, i - begin);
      if (data[i] == '\r' && i + 1 < data.size() && data[i + 1] == '\n') ++i;
      begin = ++i;
    } else {
      ++i;
    }
  }
  if (begin < data.size()) tokens.emplace_back(data, begin, data.size() - begin);
  try {
    return FromTokens(std::move(tokens));
  } catch (const Error& e) {
    throw Error("vocabulary file '" + path + "': " + e.what(), e.code());
  }
}

Vocab Vocab::FromTokens(std::vector<std::string> tokens) {
  Vocab v;
  v.tokens_ = std::move(tokens);
  v.ids_.reserve(v.tokens_.size());
  for (int id = 0; id < int(v.tokens_.size()); ++id) {
    const std::string& t = v.tokens_[id];
    v.ids_[t] = id;  // a repeated token keeps its last id, as in transformers
    std::string_view body = t;
    if (body.size() > 2 && body.substr(0, 2) == "##") body.remove_prefix(2);
    int chars = 0;
    for (char c : body) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    v.max_token_chars_ = std::max(v.max_token_chars_, chars);
  }
  v.unk_id_ = v.Find("[UNK]");
  v.cls_id_ = v.Find("[CLS]");
  v.sep_id_ = v.Find("[SEP]");
  v.pad_id_ = v.Find("[PAD]");
  if (v.unk_id_ < 0 || v.cls_id_ < 0 || v.sep_id_ < 0) {
    throw Error("vocabulary of " + std::to_string(v.tokens_.size()) +
                " tokens lacks one of [UNK], [CLS], [SEP] (a BERT vocab.txt has all three)");
  }
  return v;
}

}  // namespace hotline::text
