#include "http/http_message.h"

namespace ds::http {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string HttpRequest::header(std::string_view name) const {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return h.value;
  return {};
}

bool HttpRequest::has_header(std::string_view name) const {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return true;
  return false;
}

}  // namespace ds::http
