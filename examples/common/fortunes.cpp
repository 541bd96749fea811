// The fortunes and text files (see fortunes.h).
#include "examples/common/fortunes.h"

#include <fstream>
#include <sstream>

#include "common/check.h"

namespace lockstep::examples {

const std::vector<std::string>& fortune_files() {
  static const std::vector<std::string> files = {
      "art",       "computers",  "cookie",     "debian",        "definitions", "disclaimer",   "drugs",
      "education", "ethnic",     "food",       "fortunes",      "goedel",      "humorists",    "kids",
      "knghtbrd",  "law",        "linux",      "linuxcookie",   "literature",  "love",         "magic",
      "medicine",  "men-women",  "miscellaneous", "news",       "paradoxum",   "people",       "perl",
      "pets",      "platitudes", "politics",   "pratchett",     "riddles",     "science",      "songs-poems",
      "sports",    "startrek",   "tao",        "translate-me",  "wisdom",      "work",         "zippy"};
  return files;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOCKSTEP_CHECK(in.good(), "read_text_file: cannot read '", path, "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string read_fortunes(const std::string& dir) {
  std::string all;
  for (const auto& f : fortune_files()) {
    std::ifstream probe(dir + "/" + f);
    LOCKSTEP_CHECK(probe.good(), "read_fortunes: the default text needs Debian's fortunes package: cannot read '",
                   dir, "/", f, "' (install it with apt-get install fortunes, or pass --text FILE)");
    all += read_text_file(dir + "/" + f);
  }
  return all;
}

}  // namespace lockstep::examples
