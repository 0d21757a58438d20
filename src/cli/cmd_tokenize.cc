// hotline tokenize --vocab FILE [--max-len N] [--no-lowercase] [--normalize-width]
// Text lines on stdin, one JSON line per input line on stdout: {"ids":[...],"offsets":[[s,e],...]}
// (code-point offsets; [CLS]/[SEP] get [0,0]). A line that is not valid UTF-8 gets
// {"error": "..."} and the command goes on (exit code 1 at the end), so one bad line in a stream
// does not lose the others.
#ifdef HOTLINE_HAVE_TEXT
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "base/error.h"
#include "cli/command.h"
#include "text/tokenizer.h"

namespace {

struct Options {
  std::string vocab;
  int max_len = 512;
  bool no_lowercase = false;
  bool normalize_width = false;
  bool no_special_literals = false;
};

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(char(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(char(c));
    }
  }
  out->push_back('"');
}

hotline::cli::Registrar reg(
    "tokenize", "Tokenize text lines with a BERT vocab.txt (JSON lines out)", [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--vocab", o->vocab, "BERT vocab.txt")->required();
      app.add_option("--max-len", o->max_len, "maximum tokens including [CLS] and [SEP]")
          ->check(CLI::Range(2, 1 << 30));
      app.add_flag("--no-lowercase", o->no_lowercase, "do_lower_case=False (keeps accents)");
      app.add_flag("--normalize-width", o->normalize_width,
                   "fold full-width forms U+FF01-FF5E to ASCII and U+3000 to a space first");
      app.add_flag("--no-special-literals", o->no_special_literals,
                   "treat \"[CLS]\" etc. in the text as plain text");
      return [o]() -> int {
        hotline::text::TokenizerOptions topts;
        topts.lowercase = !o->no_lowercase;
        topts.normalize_width = o->normalize_width;
        topts.max_length = o->max_len;
        topts.special_literals = !o->no_special_literals;
        auto vocab =
            std::make_shared<const hotline::text::Vocab>(hotline::text::Vocab::Load(o->vocab));
        hotline::text::Tokenizer tok(vocab, topts);
        std::ios::sync_with_stdio(false);
        std::string line, out;
        int rc = 0;
        while (std::getline(std::cin, line)) {
          if (!line.empty() && line.back() == '\r') line.pop_back();
          out.clear();
          try {
            const auto enc = tok.Encode(line);
            out += "{\"ids\":[";
            for (size_t i = 0; i < enc.ids.size(); ++i) {
              if (i) out += ',';
              out += std::to_string(enc.ids[i]);
            }
            out += "],\"offsets\":[";
            for (size_t i = 0; i < enc.offsets.size(); ++i) {
              if (i) out += ',';
              out += '[' + std::to_string(enc.offsets[i].start) + ',' +
                     std::to_string(enc.offsets[i].end) + ']';
            }
            out += "],\"truncated\":";
            out += enc.truncated ? "true" : "false";
            out += "}\n";
          } catch (const hotline::Error& e) {
            out += "{\"error\":";
            AppendJsonString(e.what(), &out);
            out += "}\n";
            rc = 1;
          }
          std::cout << out;
        }
        std::cout.flush();
        return rc;
      };
    });

}  // namespace
#endif  // HOTLINE_HAVE_TEXT
