// The function tools of a request, checked the same way whichever API declared them: a name the
// chat templates and tool parsers can carry, no repeats, and parameters that describe a JSON
// object (tool arguments are always one, so a schema admitting anything else would let a forced
// call's grammar write arguments that come back as no call).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "server/generation_request.h"

namespace ds::server {

// 1 to 64 letters, digits, '_' or '-'.
bool valid_tool_name(const std::string& name);

// The parameters schema the grammar compiler gets: refused (a 400 naming `path`, the tool and
// the place in the schema) when it admits anything but an object; one that says nothing of the
// type at its root ({}, annotations, `required` alone) is taken as any object, and the schema
// returned carries "type": "object".
nlohmann::ordered_json checked_parameters(const nlohmann::ordered_json& schema, const std::string& path,
                                          const std::string& tool);

// Adds one function tool to g.tools. `where` names the definition in the client's body
// ("tools[2]"), `parameters_path` its schema ("tools[2].input_schema"), `param` the error's
// param field. g.tools_json is the caller's: each API shows its tools to the template its way.
void add_tool(GenerationRequest& g, const std::string& name, const nlohmann::ordered_json* parameters,
              const std::string& where, const std::string& parameters_path, const std::string& param);

// A named choice must name a declared tool; a forced one needs tools.
void check_tool_choice(const GenerationRequest& g, const std::string& param);

}  // namespace ds::server
