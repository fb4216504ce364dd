#include "bench/text_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ds::bench {

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DS_CHECK(f, "cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  DS_CHECK(!f.bad(), "read failed for " + path);
  return ss.str();
}

}  // namespace ds::bench
