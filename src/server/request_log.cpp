#include "server/request_log.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "server/json_text.h"

namespace ds::server {

RequestLog::~RequestLog() {
  if (file_) std::fclose(file_);
}

void RequestLog::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw Error("--request-log: cannot open '" + path + "' for appending: " + std::strerror(errno));
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) std::fclose(file_);
  file_ = f;
}

void RequestLog::write(const nlohmann::json& line) {
  const std::string text = dump_json(line) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace ds::server
