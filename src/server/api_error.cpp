#include "server/api_error.h"

namespace ds::server {

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", what()}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", e}};
}

nlohmann::json ApiError::anthropic_body() const {
  std::string t;
  switch (status) {
    case 401: t = "authentication_error"; break;
    case 403: t = "permission_error"; break;
    case 404: t = "not_found_error"; break;
    case 413: t = "request_too_large"; break;
    case 429: t = "rate_limit_error"; break;
    case 503:
    case 529: t = "overloaded_error"; break;
    default: t = status >= 500 ? "api_error" : "invalid_request_error";
  }
  // The field, when one is at fault, is in the message already; Anthropic's shape has no param.
  return {{"type", "error"}, {"error", {{"type", t}, {"message", what()}}}};
}

ApiError invalid_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, param, {}, "invalid_request");
}

ApiError unauthorized(const std::string& message) {
  return ApiError(401, "authentication_error", message, {}, "invalid_api_key", "authentication");
}

ApiError model_not_found(const std::string& model, const std::string& served_names) {
  return ApiError(404, "not_found_error",
                  "The model `" + model + "` does not exist. This server serves: " + served_names,
                  "model", "model_not_found", "not_found");
}

ApiError not_found(const std::string& message) {
  return ApiError(404, "not_found_error", message, {}, {}, "not_found");
}

ApiError overloaded(const std::string& message) {
  return ApiError(503, "server_error", message, {}, "server_overloaded", "queue_full");
}

ApiError shutting_down(const std::string& message) {
  return ApiError(503, "server_error", message, {}, "server_shutting_down", "shutting_down");
}

ApiError internal_error(const std::string& message) {
  return ApiError(500, "server_error", message, {}, {}, "internal");
}

}  // namespace ds::server
