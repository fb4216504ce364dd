// GET /metrics: the engine's registry in the Prometheus text format.
#pragma once
#include <prometheus/registry.h>

#include <string>

namespace ds::server {

std::string metrics_text(prometheus::Registry& registry);

}  // namespace ds::server
