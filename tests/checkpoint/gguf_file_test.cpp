// GGUF files: the container reader and writer (every value kind, strict refusals of truncated
// and mutated files, counts and lengths past their ceilings) and ggml's block layouts. Models
// read from GGUF files are tests/model/gguf_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/ggml_blocks.h"
#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_writer.h"
#include "core/error.h"
#include "kernels/quant_formats.h"
#include "../support/scratch_files.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& tag) { return test::scratch_path("ds-gguf", tag); }

using test::write_bytes;

// A small file with a value of every kind and two tensors.
GgufWriter sample() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_i32("x.i32", -7);
  w.set_u64("x.u64", 1ull << 40);
  w.set_f32("x.f32", 0.25f);
  w.set_bool("x.bool", true);
  w.set_strings("x.strings", {"a", "", "ccc"});
  w.set_i32s("x.ints", {1, -2, 3});
  w.set_f32s("x.floats", {0.5f, 1.5f});
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) - 10;
  w.add_tensor("t.f32", uint32_t(GgmlType::F32), {32, 2}, std::as_bytes(std::span<const float>(v)));
  std::vector<std::byte> q(34, std::byte{1});
  w.add_tensor("t.q8", uint32_t(GgmlType::Q8_0), {32}, q);
  return w;
}

TEST(GgufFile, ReadsWhatTheWriterWrote) {
  const std::string p = temp_path("sample.gguf");
  sample().write(p);
  EXPECT_TRUE(is_gguf_file(p));
  const GgufFile g = GgufFile::open(p);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.block_count"), 2);
  EXPECT_EQ(g.get_int("x.i32"), -7);
  EXPECT_EQ(g.get_int("x.u64"), int64_t(1) << 40);
  EXPECT_EQ(g.get_float("x.f32"), 0.25);
  EXPECT_TRUE(g.get_bool("x.bool"));
  EXPECT_EQ(g.find("x.strings")->strings, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(g.find("x.ints")->ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g.find("x.floats")->floats, (std::vector<double>{0.5, 1.5}));
  EXPECT_THROW(g.get_int("general.architecture"), Error);  // wrong type, named
  EXPECT_THROW(g.get_string("missing"), Error);
  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensor* t = g.find_tensor("t.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(t->rows(), 2);
  float x;
  std::memcpy(&x, t->data + 4 * 33, 4);
  EXPECT_EQ(x, 23.f);
  EXPECT_EQ(g.find_tensor("t.q8")->nbytes, 34u);
  EXPECT_EQ((g.find_tensor("t.q8")->data - g.bytes().data()) % 32, 0);
  fs::remove(p);
}

TEST(GgufFile, EveryTruncationIsRefusedCleanly) {
  const std::vector<std::byte> full = sample().to_bytes();
  const std::string p = temp_path("trunc.gguf");
  write_bytes(p, full);
  const GgufFile whole = GgufFile::open(p);
  const GgufTensor& last = whole.tensors().back();
  const size_t end = size_t(last.data - whole.bytes().data()) + last.nbytes;  // the padding after it is optional
  // Every cut inside the header, and through the data, fails.
  for (size_t n = 0; n < end; n += (n < 600 ? 1 : 7)) {
    write_bytes(p, std::vector<std::byte>(full.begin(), full.begin() + long(n)));
    EXPECT_THROW(GgufFile::open(p), Error) << "cut at " << n << " of " << full.size();
  }
  fs::remove(p);
}

// Overwrites bytes at the offset where `needle` (a key or name) ends.
std::vector<std::byte> patched(std::vector<std::byte> b, const std::string& needle, size_t skip, std::vector<uint8_t> bytes) {
  const std::string s(reinterpret_cast<const char*>(b.data()), b.size());
  const size_t at = s.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  for (size_t i = 0; i < bytes.size(); ++i) b[at + needle.size() + skip + i] = std::byte{bytes[i]};
  return b;
}

void expect_refused(const std::vector<std::byte>& b, const std::string& fragment) {
  const std::string p = temp_path("mut.gguf");
  write_bytes(p, b);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "opened a file that should fail with '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  fs::remove(p);
}

TEST(GgufFile, MutatedHeadersAreRefusedNamingWhatIsWrong) {
  const std::vector<std::byte> ok = sample().to_bytes();
  std::vector<std::byte> b = ok;
  b[0] = std::byte{'X'};
  expect_refused(b, "not a GGUF file");
  b = ok;
  b[4] = std::byte{1};
  expect_refused(b, "version 1");
  b = ok;
  b[8] = std::byte{0xff}, b[9] = std::byte{0xff}, b[10] = std::byte{0xff};
  expect_refused(b, "tensor count");
  b = ok;
  b[16] = std::byte{0xff}, b[17] = std::byte{0xff}, b[18] = std::byte{0xff};
  expect_refused(b, "metadata count");
  // value type of llama.block_count (u32 = 4) -> 13, which GGUF lacks
  expect_refused(patched(ok, "llama.block_count", 0, {13, 0, 0, 0}), "value type 13");
  // the string array -> an array of arrays
  expect_refused(patched(ok, "x.strings", 4, {9, 0, 0, 0}), "nested arrays");
  // its length -> 2^40 elements
  expect_refused(patched(ok, "x.strings", 8, {0, 0, 0, 0, 0, 1, 0, 0}), "cannot fit");
  // the bool -> 2
  expect_refused(patched(ok, "x.bool", 4, {2}), "bool must be 0 or 1");
  // t.f32's dims count -> 5
  expect_refused(patched(ok, "t.f32", 0, {5, 0, 0, 0}), "dims");
  // its first dim -> 0
  expect_refused(patched(ok, "t.f32", 4, {0, 0, 0, 0, 0, 0, 0, 0}), "dim 0 = 0");
  // t.q8's row length -> 31 (not whole blocks)
  expect_refused(patched(ok, "t.q8", 4, {31}), "not a multiple of its block");
  // t.q8's type -> 4 (retired in ggml)
  expect_refused(patched(ok, "t.q8", 12, {4}), "ggml does not define");
  // t.q8's offset -> 8 (misaligned), -> 0 (overlaps t.f32), -> far past the end
  expect_refused(patched(ok, "t.q8", 16, {8}), "not a multiple of the alignment");
  expect_refused(patched(ok, "t.q8", 16, {0, 0}), "overlaps");
  expect_refused(patched(ok, "t.q8", 16, {0, 0, 0, 1}), "past the end");
  // a second key spelled like the first
  expect_refused(patched(ok, "x.i32", -3, {'u', '6', '4'}), "appears twice");
}

TEST(GgufFile, AnAlignmentKeyMustBeAPowerOfTwo) {
  GgufWriter w;
  std::vector<std::byte> v = {std::byte{3}, std::byte{0}, std::byte{0}, std::byte{0}};
  w.set_raw("general.alignment", uint32_t(GgufValueType::U32), v);
  const std::string p = temp_path("align.gguf");
  w.write(p);
  EXPECT_THROW(GgufFile::open(p), Error);
  fs::remove(p);
}

TEST(GgmlBlocks, RepackingIsExactBothWaysAndFollowsGgmlsNibbleOrder) {
  for (QuantFormat f : {QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::MXFP4}) {
    const int rows = 3, k = 64;
    std::vector<float> x(size_t(rows) * k);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f) * 3;
    std::vector<uint8_t> codes(rows * quant_code_bytes(f, k)), scales(rows * quant_scale_bytes(f, k));
    for (int r = 0; r < rows; ++r)
      quantize_row(f, x.data() + r * k, k, codes.data() + r * quant_code_bytes(f, k), scales.data() + r * quant_scale_bytes(f, k));
    int be = 0, bb = 0;
    ASSERT_TRUE(ggml_type_layout(ggml_type_of(f), &be, &bb));
    std::vector<std::byte> blocks(size_t(rows) * (k / be) * bb);
    codes_to_ggml_blocks(f, codes.data(), scales.data(), rows, k, blocks.data());
    std::vector<uint8_t> c2(codes.size()), s2(scales.size());
    ggml_blocks_to_codes(f, blocks.data(), rows, k, c2.data(), s2.data());
    EXPECT_EQ(c2, codes) << quant_format_name(f);
    EXPECT_EQ(s2, scales) << quant_format_name(f);
  }
  // One Q4_0 block by hand: ggml's byte 0 = 0x9a holds element 0 (0xa) and element 16 (0x9).
  std::vector<std::byte> block(18, std::byte{0x88});
  const uint16_t one = f32_to_f16(1.f);
  std::memcpy(block.data(), &one, 2);
  block[2] = std::byte{0x9a};
  std::vector<uint8_t> codes(16), scales(2);
  ggml_blocks_to_codes(QuantFormat::Q4_0, block.data(), 1, 32, codes.data(), scales.data());
  std::vector<float> w(32);
  dequantize_row(QuantFormat::Q4_0, codes.data(), scales.data(), 32, w.data());
  EXPECT_EQ(w[0], 2.f);   // 0xa - 8
  EXPECT_EQ(w[16], 1.f);  // 0x9 - 8
  EXPECT_EQ(w[1], 0.f);
}

// The header's own counts and lengths: each checked against the bytes the file has left and a
// ceiling before anything is allocated for it; the error names the field and the range.
TEST(GgufFile, CountsAndLengthsPastTheirCeilingAreRefusedNamingTheRange) {
  const std::vector<std::byte> ok = sample().to_bytes();
  std::vector<std::byte> b = ok;
  b[8] = std::byte{0}, b[9] = std::byte{0}, b[10] = std::byte{0}, b[11] = std::byte{0x80};  // 2^31 tensors
  expect_refused(b, "tensor count 2147483648 is impossible");
  b = ok;
  b[16] = std::byte{0}, b[17] = std::byte{0}, b[18] = std::byte{0x10};  // 2^20 metadata entries in a tiny file
  expect_refused(b, "metadata count 1048576 is impossible");
  // An array length past what the file holds, and one the file holds but past the ceiling.
  expect_refused(patched(ok, "x.ints", 8, {0, 0, 0, 2}), "array of 33554432 elements cannot fit");
  {
    const uint64_t n = (uint64_t(1) << 24) + 1;
    std::vector<std::byte> arr(12 + n, std::byte{0});
    const uint32_t u8 = uint32_t(GgufValueType::U8);
    std::memcpy(arr.data(), &u8, 4);
    std::memcpy(arr.data() + 4, &n, 8);
    GgufWriter big;
    big.set_raw("x.bytes", uint32_t(GgufValueType::Array), arr);
    std::vector<std::byte> bb = big.to_bytes();
    expect_refused(bb, "key 'x.bytes': array of 16777217 elements, outside [0, 16777216]");
  }
  // A key and a tensor name longer than their ceilings (and than the file).
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32(std::string(70000, 'k'), 1);
  const std::string p = temp_path("longkey.gguf");
  w.write(p);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "took a 70000-byte key";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metadata key at byte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is 70000 bytes long, outside [0, 65535]"), std::string::npos) << e.what();
  }
  GgufWriter t;
  std::vector<float> v(32, 1.f);
  t.add_tensor(std::string(5000, 'n'), uint32_t(GgmlType::F32), {32}, std::as_bytes(std::span<const float>(v)));
  t.write(p);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "took a 5000-byte tensor name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor name at byte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("outside [0, 4096]"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

}  // namespace
}  // namespace ds