// The bytes of HTTP/1.1 on the wire that the transport writes itself (status lines, headers,
// chunk framing) and the parts of a request target it splits. Plain functions, tested alone.
#pragma once
#include <string>
#include <string_view>

#include "http/http_message.h"

namespace ds::http {

// "OK", "Not Found", ...; "Unknown" for a code without a phrase here.
const char* reason_phrase(int status);

// Status line and headers of a response with a body of `body_size` bytes, or of a chunked
// stream when `chunked`. `keep_alive` false adds "Connection: close". A 1xx, 204 or 304 status
// has no body, so no Content-Length or Transfer-Encoding either.
std::string response_head(const HttpResponse& r, size_t body_size, bool chunked, bool keep_alive);

// One chunk of a chunked body ("1a\r\n" bytes "\r\n"); an empty input gives nothing (the empty
// chunk ends the body, and is written by last_chunk()).
std::string chunk(std::string_view bytes);
inline const char* last_chunk() { return "0\r\n\r\n"; }

// A target's path with %XX escapes decoded (a '+' stays a '+'); a bad escape stays as written.
std::string decode_path(std::string_view path);

// Splits "/a/b?x=1" into path "/a/b" (decoded) and query "x=1".
void split_target(std::string_view target, std::string* path, std::string* query);

}  // namespace ds::http
