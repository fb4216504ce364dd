#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace ds {

void log_to_stderr() {
  auto logger = std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_level(spdlog::default_logger()->level());
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace ds
