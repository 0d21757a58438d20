// Tokenizer speed: MB of UTF-8 per second on one core (one thread).
//
//   tokenizer_bench --vocab VOCAB [--texts FILE] [--seconds S] [--no-lowercase] [--normalize-width]
//
// Texts: one per line from FILE, or a built-in mix of hotline calls (Chinese with digits, Latin,
// full-width forms and punctuation). Prints one JSON line:
//   {"mb_per_s", "texts_per_s", "tokens_per_s", "bytes", "texts", "seconds", "threads": 1}
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "text/tokenizer.h"

namespace {

std::vector<std::string> BuiltinTexts() {
  return {
      "朝阳区建国路88号工地晚上十一点还在打桩，吵得人睡不着",
      "我要查一下我的社保缴费记录，身份证号是110105198806071234",
      "你好，我家住在海淀区中关村大街12号院3号楼，从昨天晚上开始停水了",
      "车牌京A12345的出租车拒载，司机态度很差，电话幺三八一二三四五六七八",
      "工单ＧＤ２０２６１１２８００１办得怎么样了？已经一个星期了",
      "300路公交车今天早上等了四十分钟都没来，能不能反映一下",
      "在华联超市办的预付卡要退费三千五百元，商家不给退",
      "嗯那个就是我们小区的电梯又坏了 Elevator stopped on 5F, please help",
      "喂你好",
      "鑫源物业公司不管事儿，楼道里垃圾堆了好几天了都没人清运！",
  };
}

}  // namespace

int main(int argc, char** argv) {
  std::string vocab_path, texts_path;
  double seconds = 2.0;
  hotline::text::TokenizerOptions opts;
  opts.normalize_width = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--vocab") vocab_path = next();
    else if (a == "--texts") texts_path = next();
    else if (a == "--seconds") seconds = std::stod(next());
    else if (a == "--no-lowercase") opts.lowercase = false;
    else if (a == "--normalize-width") opts.normalize_width = true;
    else {
      std::fprintf(stderr, "usage: tokenizer_bench --vocab VOCAB [--texts FILE] [--seconds S] "
                           "[--no-lowercase] [--normalize-width]\n");
      return 2;
    }
  }
  if (vocab_path.empty()) {
    std::fprintf(stderr, "tokenizer_bench: --vocab is required\n");
    return 2;
  }
  try {
    std::vector<std::string> texts;
    if (!texts_path.empty()) {
      std::ifstream in(texts_path);
      if (!in) throw hotline::Error("cannot open " + texts_path);
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) texts.push_back(line);
    } else {
      texts = BuiltinTexts();
    }
    if (texts.empty()) throw hotline::Error("no texts");
    auto vocab = std::make_shared<const hotline::text::Vocab>(hotline::text::Vocab::Load(vocab_path));
    hotline::text::Tokenizer tok(vocab, opts);
    size_t bytes = 0, n = 0, tokens = 0;
    // Warm-up, then run whole passes over the texts until the time is up.
    for (const auto& t : texts) tokens += tok.Encode(t).ids.size();
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      for (const auto& t : texts) {
        tokens += tok.Encode(t).ids.size();
        bytes += t.size();
        ++n;
      }
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    std::printf(
        "{\"mb_per_s\": %.2f, \"texts_per_s\": %.0f, \"tokens_per_s\": %.0f, \"bytes\": %zu, "
        "\"texts\": %zu, \"seconds\": %.3f, \"threads\": 1}\n",
        bytes / elapsed / 1e6, n / elapsed, tokens / elapsed, bytes, n, elapsed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
