// Errors as the APIs shape them (OpenAI's, and Anthropic's for /v1/messages), with the HTTP
// status beside. Request handling throws ApiError; the route wrapper turns it into the
// response, so no handler writes an error body by hand.
#pragma once
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace ds::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // invalid_request_error, authentication_error, not_found_error, server_error
  std::string param;  // the offending field, empty when none
  std::string code;   // machine-readable code, empty when none
  std::string kind;   // metrics label for deltaserve:request_errors_total

  ApiError(int status, std::string type, std::string message, std::string param = {},
           std::string code = {}, std::string kind = {})
      : std::runtime_error(std::move(message)), status(status), type(std::move(type)),
        param(std::move(param)), code(std::move(code)), kind(std::move(kind)) {}

  // OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
  nlohmann::json body() const;
  // Anthropic's: {"type": "error", "error": {"type", "message"}}, the type named from the status
  // as Anthropic's API names it (invalid_request_error, authentication_error, not_found_error,
  // request_too_large, rate_limit_error, api_error, overloaded_error).
  nlohmann::json anthropic_body() const;
};

// 400 naming the field.
ApiError invalid_request(const std::string& message, const std::string& param = {});
ApiError unauthorized(const std::string& message);
ApiError model_not_found(const std::string& model, const std::string& served_names);
ApiError not_found(const std::string& message);
ApiError overloaded(const std::string& message);       // 503, with Retry-After
ApiError shutting_down(const std::string& message);    // 503
ApiError internal_error(const std::string& message);   // 500

}  // namespace ds::server
