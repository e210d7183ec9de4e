// load_prefix / store_prefix: the byte paths every pass takes at a buffer's end or where a user
// buffer is not vector-aligned, against a byte-by-byte reference.
#include "ark/dma/common.hpp"
#include "ark/platform/host.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <random>

namespace {
template <std::size_t V>
void check_prefix(std::mt19937& rng) {
  using P = ark::platform::host;
  alignas(16) unsigned char src[64], dst[64], bytes[V];
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (std::size_t off = 0; off <= V; ++off)
    for (std::size_t valid = 0; valid <= V + 3; ++valid) {
      CAPTURE(V);
      CAPTURE(off);
      CAPTURE(valid);
      const std::size_t n = valid < V ? valid : V;
      const ark::vec<V> v = ark::dma::load_prefix<P, V>(src + off, valid);
      std::memcpy(bytes, &v, V);
      for (std::size_t i = 0; i < V; ++i) REQUIRE(bytes[i] == (i < n ? src[off + i] : 0));

      ark::vec<V> w;
      for (auto& b : bytes) b = static_cast<unsigned char>(rng());
      std::memcpy(&w, bytes, V);
      std::memset(dst, 0xa5, sizeof dst);
      ark::dma::store_prefix<P, V>(dst + off, w, valid);
      for (std::size_t i = 0; i < sizeof dst; ++i)
        REQUIRE(dst[i] == (i >= off && i < off + n ? bytes[i - off] : 0xa5));
    }
}
} // namespace

TEST_CASE("load_prefix and store_prefix: every alignment and length, 8- and 16-byte vectors") {
  std::mt19937 rng(7);
  for (int round = 0; round < 4; ++round) {
    check_prefix<8>(rng);
    check_prefix<16>(rng);
  }
}
