// Little-endian loads and stores: the byte order on the wire, round trips at every width, and no
// alignment needed.
#include "common/little_endian.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

namespace byteps {
namespace {

TEST(LittleEndianTest, StoresLeastSignificantByteFirst) {
  std::array<uint8_t, 8> b{};
  StoreLe16(b.data(), 0x0102);
  EXPECT_EQ(b[0], 0x02);
  EXPECT_EQ(b[1], 0x01);
  StoreLe32(b.data(), 0x01020304u);
  EXPECT_EQ((std::array<uint8_t, 4>{b[0], b[1], b[2], b[3]}), (std::array<uint8_t, 4>{4, 3, 2, 1}));
  StoreLe64(b.data(), 0x0102030405060708ull);
  EXPECT_EQ(b, (std::array<uint8_t, 8>{8, 7, 6, 5, 4, 3, 2, 1}));
}

TEST(LittleEndianTest, LoadsWhatTheWireSays) {
  const uint8_t wire[8] = {0x42, 0x50, 0x53, 0x31, 0xff, 0x00, 0x80, 0x7f};
  EXPECT_EQ(LoadLe16(wire), 0x5042u);
  EXPECT_EQ(LoadLe32(wire), 0x31535042u);  // "BPS1", the frame magic
  EXPECT_EQ(LoadLe64(wire), 0x7f8000ff31535042ull);
}

TEST(LittleEndianTest, RoundTripsExtremesAtEveryWidth) {
  uint8_t b[8];
  for (uint64_t v : {0ull, 1ull, 0x80ull, 0xffffull, 0x80000000ull, 0xffffffffull, 0x8000000000000000ull, ~0ull}) {
    StoreLe64(b, v);
    EXPECT_EQ(LoadLe64(b), v);
    StoreLe32(b, static_cast<uint32_t>(v));
    EXPECT_EQ(LoadLe32(b), static_cast<uint32_t>(v));
    StoreLe16(b, static_cast<uint16_t>(v));
    EXPECT_EQ(LoadLe16(b), static_cast<uint16_t>(v));
  }
}

TEST(LittleEndianTest, WorksAtUnalignedAddresses) {
  uint8_t buf[16] = {};
  for (size_t off = 0; off < 8; ++off) {
    StoreLe64(buf + off, 0x1122334455667788ull);
    EXPECT_EQ(LoadLe64(buf + off), 0x1122334455667788ull) << "offset " << off;
    EXPECT_EQ(buf[off], 0x88);
  }
}

TEST(LittleEndianTest, UsableAtCompileTime) {
  constexpr auto bytes = [] {
    std::array<uint8_t, 4> b{};
    StoreLe32(b.data(), 0xdeadbeefu);
    return b;
  }();
  static_assert(bytes[0] == 0xef && bytes[3] == 0xde);
  static_assert(LoadLe32(bytes.data()) == 0xdeadbeefu);
}

}  // namespace
}  // namespace byteps
