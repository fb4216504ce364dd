#include "http/wire_format.h"

#include <cstdio>

namespace ds::http {

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string response_head(const HttpResponse& r, size_t body_size, bool chunked, bool keep_alive) {
  std::string h = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
  if (!r.content_type.empty()) h += "Content-Type: " + r.content_type + "\r\n";
  for (const Header& x : r.headers) h += x.name + ": " + x.value + "\r\n";
  // 1xx, 204 and 304 answers have no body, and no framing header may say otherwise.
  const bool bodiless = (r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304;
  if (!bodiless) h += chunked ? std::string("Transfer-Encoding: chunked\r\n") : "Content-Length: " + std::to_string(body_size) + "\r\n";
  if (!keep_alive) h += "Connection: close\r\n";
  h += "\r\n";
  return h;
}

std::string chunk(std::string_view bytes) {
  if (bytes.empty()) return {};
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  std::string out(size);
  out.append(bytes);
  out += "\r\n";
  return out;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string decode_path(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '%' && i + 2 < p.size()) {
      const int hi = hex_value(p[i + 1]), lo = hex_value(p[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += char(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += p[i];
  }
  return out;
}

void split_target(std::string_view target, std::string* path, std::string* query) {
  const size_t q = target.find('?');
  *path = decode_path(target.substr(0, q));
  *query = q == std::string_view::npos ? std::string() : std::string(target.substr(q + 1));
}

}  // namespace ds::http
