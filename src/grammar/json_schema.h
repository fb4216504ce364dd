// JSON schemas compiled into grammars, for response_format json_schema and for tool-call
// arguments. The output is compact JSON: no whitespace except one optional space after ':'
// and ','. Bounding the whitespace is what keeps a model from padding forever; clients parse
// compact JSON like any other.
//
// Supported (the subset agents and the OpenAI strict mode use): type (one or a list), properties
// (emitted in the schema's order), required (other properties are optional), additionalProperties
// (false, true or a schema; with declared properties only those are generated), items, minItems,
// maxItems, enum, const, anyOf, oneOf (as anyOf), allOf of one schema, $ref to #/$defs/... or
// #/definitions/... (recursion allowed), minLength, maxLength, pattern (grammar/regex.h), format
// date, time, date-time and uuid; the annotations title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly are ignored. Any other keyword is a
// SchemaError that names it and where it is, so a client never gets output that silently
// ignores a constraint it asked for.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "grammar/grammar.h"

namespace ds::grammar {

class SchemaError : public Error {
 public:
  SchemaError(const std::string& what, std::string where) : Error(what), where_(std::move(where)) {}
  // A JSON pointer into the schema ("" for its root, "/properties/name").
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// Rules for one JSON value matching `schema`, added to g (whose other rules stay as they are);
// returns the value's rule. Throws SchemaError, or GrammarTooLarge past g's limits.
RuleId add_json_schema(Grammar& g, const nlohmann::ordered_json& schema);
// Rules for any JSON value, or any JSON object.
RuleId add_any_json_value(Grammar& g);
RuleId add_any_json_object(Grammar& g);

// Whole grammars whose root is that value. A schema with no finite value (an object whose
// required property is itself) or a left-recursive definition is a SchemaError naming the
// definition; one past the limits is a GrammarTooLarge.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const GrammarLimits& limits = {});
Grammar json_object_grammar(const GrammarLimits& limits = {});

}  // namespace ds::grammar
