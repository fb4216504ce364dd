// Reads a whole file as bytes; the error names the path.
#pragma once
#include <string>

namespace ds::bench {

std::string read_text_file(const std::string& path);

}  // namespace ds::bench
