#include "server/tools/tool_call_format.h"

namespace ds::server {

// The registration of every format: the one place that maps a ToolFormat to its file.
const ToolCallFormat& tool_call_format(ToolFormat format) {
  switch (format) {
    case ToolFormat::Kimi:
      return kimi_format();
    case ToolFormat::HermesJson:
      break;
  }
  return hermes_json_format();
}

}  // namespace ds::server
