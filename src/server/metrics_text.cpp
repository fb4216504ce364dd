#include "server/metrics_text.h"

#include <prometheus/text_serializer.h>

namespace ds::server {

std::string metrics_text(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

}  // namespace ds::server
