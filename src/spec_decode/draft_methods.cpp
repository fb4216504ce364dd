// The registry of draft methods: a new method is its own file (a DraftMethod and its factory)
// plus one line here. A table rather than self-registering objects: the methods live in a static
// library, whose unreferenced object files the linker would drop with their registrations.
#include <algorithm>

#include "core/error.h"
#include "spec_decode/draft_method.h"

namespace ds {

namespace {
constexpr DraftMethodEntry kMethods[] = {
    {"draft_model", "draft_model", make_draft_model_method},
    {"suffix", "suffix", make_suffix_method},
    {"parallel", "parallel_drafter", make_parallel_method},
};
}  // namespace

std::span<const DraftMethodEntry> draft_methods() { return kMethods; }

const DraftMethodEntry* find_draft_method(const std::string& name) {
  const auto it = std::find_if(std::begin(kMethods), std::end(kMethods), [&](const DraftMethodEntry& e) { return name == e.name; });
  return it == std::end(kMethods) ? nullptr : it;
}

bool is_draft_method(const std::string& name) { return find_draft_method(name) != nullptr; }

std::string draft_method_names() {
  std::string s;
  for (const DraftMethodEntry& e : kMethods) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

std::unique_ptr<DraftMethod> make_draft_method(const SpecOptions& o, Model& target) {
  const DraftMethodEntry* e = find_draft_method(o.draft_method);
  DS_CHECK(e != nullptr, "--draft-method '" + o.draft_method + "' is not one of " + draft_method_names());
  return e->make(o, target);
}

}  // namespace ds
