// A golden acceptance-length curve: draft tokens K -> mean acceptance length AL (bonus token
// included), measured on real acceptance (`deltaserve spec calibrate` writes one). The schema
// of docs/reference's golden_al files:
//   model: ..., draft_model: ..., draft_sample_method: ..., rejection_sample_method: ...
//   <curve key>: {1: 1.85, 2: 2.51, ...}
// where the curve key is `acceptance_length`, `thinking_on` or `thinking_off` (the first of
// those present is read).
#pragma once
#include <map>
#include <string>

namespace ds {

struct GoldenCurve {
  std::string model, draft_model, draft_sample_method, rejection_sample_method;
  std::string curve_key;
  std::map<int, double> al;  // K -> AL
};

// Throws ds::Error naming the file, and the line of what is wrong.
GoldenCurve load_golden_curve(const std::string& path);
void save_golden_curve(const GoldenCurve& c, const std::string& path);

}  // namespace ds
