// Tensor storage (tensor.hpp): element sizes and raw() offsets for float and packed bf16 buffers,
// data() refusing packed storage, and the host-side bf16 packing the CUDA backend's
// copy_from_host / copy_to_host use (precision.hpp), checked against hand-worked bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "trainer/cpu_backend.hpp"
#include "trainer/precision.hpp"
#include "trainer/tensor.hpp"

namespace foresight::trainer {
namespace {

/// A host buffer of `n` elements in either storage, as a backend would hand out (no backend needed).
struct TestBuffer : Buffer {
  std::vector<std::uint8_t> bytes;
  TestBuffer(std::size_t n, Storage s) : bytes(n * storage_bytes(s)) {
    raw = bytes.data();
    elements = n;
    storage = s;
    type = s == Storage::packed_bf16 ? ElementType::bf16 : ElementType::fp32;
  }
};

TEST(TensorStorage, ElementBytesAndRawOffsets) {
  EXPECT_EQ(storage_bytes(Storage::float32), 4u);
  EXPECT_EQ(storage_bytes(Storage::packed_bf16), 2u);
  auto f = std::make_shared<TestBuffer>(24, Storage::float32);
  auto b = std::make_shared<TestBuffer>(24, Storage::packed_bf16);
  const Tensor tf(f, 0, 4, 6), tb(b, 0, 4, 6);
  EXPECT_EQ(tf.element_bytes(), 4u);
  EXPECT_EQ(tb.element_bytes(), 2u);
  EXPECT_EQ(tf.bytes(), 96u);
  EXPECT_EQ(tb.bytes(), 48u);
  // Row 2 starts 12 elements in: 48 bytes of floats, 24 bytes of bf16.
  const auto* base_f = static_cast<const std::uint8_t*>(f->raw);
  const auto* base_b = static_cast<const std::uint8_t*>(b->raw);
  EXPECT_EQ(static_cast<const std::uint8_t*>(tf.row_slice(2, 1).raw()) - base_f, 48);
  EXPECT_EQ(static_cast<const std::uint8_t*>(tb.row_slice(2, 1).raw()) - base_b, 24);
  // A view of a view (a parameter inside the flat buffer, then one of its rows) adds offsets.
  const Tensor v = tb.row_slice(1, 3).reshaped(18, 1).row_slice(5, 2);
  EXPECT_EQ(static_cast<const std::uint8_t*>(v.raw()) - base_b, (6 + 5) * 2);
  EXPECT_EQ(v.storage(), Storage::packed_bf16);
  EXPECT_EQ(v.element_type(), ElementType::bf16);
  // data() and raw() agree for float storage.
  EXPECT_EQ(static_cast<void*>(tf.row_slice(3, 1).data()), tf.row_slice(3, 1).raw());
}

TEST(TensorStorage, DataRefusesPackedBf16) {
  auto b = std::make_shared<TestBuffer>(8, Storage::packed_bf16);
  const Tensor t(b, 0, 2, 4);
  EXPECT_THROW((void)t.data(), InternalError);
  // The CPU backend's bf16 tensors hold floats: data() is theirs to use.
  auto cpu = make_cpu_backend(Precision::bf16);
  const Tensor h = cpu->zeros(2, 4);
  EXPECT_EQ(h.element_type(), ElementType::bf16);
  EXPECT_EQ(h.storage(), Storage::float32);
  EXPECT_NO_THROW((void)h.data());
  // It counts the 2 bytes per element a GPU would hold, though it keeps 4.
  const std::int64_t before = cpu->bytes_in_use();
  { Tensor t2 = cpu->zeros(10, 10); EXPECT_EQ(cpu->bytes_in_use(), before + 200); }
  { Tensor t2 = cpu->zeros_fp32(10, 10); EXPECT_EQ(cpu->bytes_in_use(), before + 400); }
}

TEST(TensorStorage, PackAndUnpackBf16ByHand) {
  // float bits -> bf16 bits, rounded to nearest even (worked by hand from the top 16 bits and the
  // 16 dropped ones: below 0x8000 truncates, above rounds up, exactly 0x8000 goes to the even one).
  struct Case {
    std::uint32_t f;
    std::uint16_t b;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80},  // 1.0 exact
      {0x3f807fffu, 0x3f80},  // just below half-way: down
      {0x3f808000u, 0x3f80},  // half-way, kept bit 0 (even): stays
      {0x3f818000u, 0x3f82},  // half-way, kept bit 1 (odd): up to even
      {0x3f808001u, 0x3f81},  // just above half-way: up
      {0xbf808001u, 0xbf81},  // the same negative
      {0x7f7fffffu, 0x7f80},  // largest float rounds to infinity
      {0x7f800000u, 0x7f80},  // +inf
      {0x7fa00000u, 0x7fe0},  // signalling NaN: kept NaN, quiet bit set
      {0x00000001u, 0x0000},  // smallest subnormal rounds to +0
  };
  std::vector<float> src;
  for (const Case& c : cases) {
    float f;
    std::memcpy(&f, &c.f, 4);
    src.push_back(f);
  }
  std::vector<kernels::bf16> packed(src.size());
  pack_bf16(src.data(), packed.data(), src.size());
  for (std::size_t i = 0; i < src.size(); ++i) EXPECT_EQ(packed[i].bits, cases[i].b) << "case " << i;
  std::vector<float> back(src.size());
  unpack_bf16(packed.data(), back.data(), back.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &back[i], 4);
    EXPECT_EQ(bits, std::uint32_t(cases[i].b) << 16) << "case " << i;  // exact widening
  }
  // Packing what unpacking gave is the identity (a device round trip changes nothing), and agrees
  // with the CPU backend's rounding of the same floats.
  std::vector<kernels::bf16> again(src.size());
  pack_bf16(back.data(), again.data(), back.size());
  for (std::size_t i = 0; i < src.size(); ++i) EXPECT_EQ(again[i].bits, packed[i].bits) << "case " << i;
  std::vector<float> rounded = src;
  round_to_bf16(rounded.data(), rounded.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (std::isnan(rounded[i])) {
      EXPECT_TRUE(std::isnan(back[i]));
      continue;
    }
    EXPECT_EQ(rounded[i], back[i]) << "case " << i;
  }
}

}  // namespace
}  // namespace foresight::trainer
