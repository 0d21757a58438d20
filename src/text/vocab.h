// A BERT vocab.txt: one token per line, the line number is the id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hotline::text {

class Vocab {
 public:
  // Reads vocab.txt the way transformers' load_vocab does: lines split on \n, \r\n or \r, no other
  // stripping; a repeated token keeps its last id. Throws hotline::Error when the file cannot be
  // read, is not UTF-8, or lacks [UNK], [CLS] or [SEP].
  static Vocab Load(const std::string& path);
  // Same from tokens in id order (tests, tools).
  static Vocab FromTokens(std::vector<std::string> tokens);

  int size() const { return int(tokens_.size()); }
  // The token's id, or -1 when it is not in the vocabulary.
  int Find(std::string_view token) const {
    auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }
  const std::string& Token(int id) const { return tokens_.at(id); }
  int unk_id() const { return unk_id_; }
  int cls_id() const { return cls_id_; }
  int sep_id() const { return sep_id_; }
  int pad_id() const { return pad_id_; }  // -1 when the vocabulary has no [PAD]
  // Longest token in code points, "##" not counted: bounds the WordPiece search.
  int max_token_chars() const { return max_token_chars_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int, Hash, std::equal_to<>> ids_;
  int unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, pad_id_ = -1;
  int max_token_chars_ = 1;
};

}  // namespace hotline::text
