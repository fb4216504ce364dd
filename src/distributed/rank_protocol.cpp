#include "distributed/rank_protocol.h"

#include <cstring>

#include "core/error.h"

namespace ds::distributed {

namespace {
struct Writer {
  std::vector<char> out;
  void i32(int32_t v) { bytes(&v, sizeof v); }
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const char*>(p);
    out.insert(out.end(), c, c + n);
  }
  void str(const std::string& s) {
    i32(int32_t(s.size()));
    bytes(s.data(), s.size());
  }
};
struct Reader {
  const std::vector<char>& in;
  size_t at = 0;
  void bytes(void* p, size_t n) {
    DS_CHECK(at + n <= in.size(), "rank protocol: a message ends early");
    std::memcpy(p, in.data() + at, n);
    at += n;
  }
  int32_t i32() {
    int32_t v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string str() {
    const int32_t n = i32();
    DS_CHECK(n >= 0, "rank protocol: a negative length");
    std::string s(size_t(n), '\0');
    bytes(s.data(), size_t(n));
    return s;
  }
};
}  // namespace

std::vector<char> encode_open(const OpenRequest& r) {
  Writer w;
  w.str(r.model_dir);
  w.i32(r.tp);
  w.i32(r.dcp);
  w.i32(r.threads);
  w.str(r.numa);
  return std::move(w.out);
}

OpenRequest decode_open(const std::vector<char>& bytes) {
  Reader r{bytes};
  OpenRequest o;
  o.model_dir = r.str();
  o.tp = r.i32();
  o.dcp = r.i32();
  o.threads = r.i32();
  o.numa = r.str();
  return o;
}

std::vector<char> encode_batch(const ForwardBatch& batch, int block_size) {
  Writer w;
  w.i32(int32_t(batch.tokens.size()));
  w.i32(int32_t(batch.seqs.size()));
  w.bytes(batch.tokens.data(), batch.tokens.size() * sizeof(int32_t));
  for (const SeqChunk& sc : batch.seqs) {
    const int32_t blocks = (sc.start_pos + sc.num_tokens + block_size - 1) / block_size;
    for (int32_t v : {sc.slot, sc.start_pos, sc.num_tokens, sc.token_offset, sc.num_logits, sc.spec_lane, blocks}) w.i32(v);
    w.bytes(sc.block_table, size_t(blocks) * sizeof(int32_t));
  }
  return std::move(w.out);
}

void decode_batch(const std::vector<char>& bytes, DecodedBatch* out) {
  Reader r{bytes};
  const int32_t n = r.i32(), s = r.i32();
  DS_CHECK(n >= 0 && s >= 0, "rank protocol: a negative batch size");
  out->tokens.resize(size_t(n));
  r.bytes(out->tokens.data(), size_t(n) * sizeof(int32_t));
  out->seqs.resize(size_t(s));
  out->tables.resize(size_t(s));
  for (int32_t i = 0; i < s; ++i) {
    SeqChunk& sc = out->seqs[size_t(i)];
    sc.slot = r.i32();
    sc.start_pos = r.i32();
    sc.num_tokens = r.i32();
    sc.token_offset = r.i32();
    sc.num_logits = r.i32();
    sc.spec_lane = r.i32();
    const int32_t blocks = r.i32();
    DS_CHECK(blocks >= 0, "rank protocol: a negative block count");
    out->tables[size_t(i)].resize(size_t(blocks));
    r.bytes(out->tables[size_t(i)].data(), size_t(blocks) * sizeof(int32_t));
    sc.block_table = out->tables[size_t(i)].data();
  }
  out->batch.tokens = out->tokens;
  out->batch.seqs = out->seqs;
}

}  // namespace ds::distributed
