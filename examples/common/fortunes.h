// The text examples/gpt and examples/word_lm train on by default: the plain-text English fortune files of
// Debian's `fortunes` package, in a fixed order, concatenated; and reading a text file of one's own.
#pragma once

#include <string>
#include <vector>

namespace lockstep::examples {

// The plain-text English fortune files of Debian's `fortunes` package, in this order,
// concatenated (the .dat indexes and .u8 links are not text; ascii-art is pictures, not prose).
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
const std::vector<std::string>& fortune_files();
// The files above read from `dir` and concatenated; throws naming the first one missing.
std::string read_fortunes(const std::string& dir = kFortunesDir);
std::string read_text_file(const std::string& path);  // throws naming the path

}  // namespace lockstep::examples
