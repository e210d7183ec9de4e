// The symmetric region's layout (team/layout.hpp): sections in order and disjoint, slots wrap, bad
// sizes rejected; and split (team/context.hpp), which divides a range among workers.
#include "ark/team/context.hpp"
#include "ark/team/layout.hpp"

#include <doctest/doctest.h>

#include <set>

TEST_CASE("layout: sections are ordered, disjoint and sized by the configuration") {
  ark::team_config c;
  c.workers = 3;
  c.max_depth = 4;
  c.slot_bytes = 4096;
  c.ll_slot_bytes = 1024;
  const ark::layout l = ark::make_layout(5, c);
  CHECK(l.slots == 5);
  CHECK(l.max_depth() == 4);
  CHECK(l.head_off < l.ack_off);
  CHECK(l.ack_off < l.bar_off);
  CHECK(l.hdr_off < l.data_off);
  CHECK(l.ll_off - l.data_off == 3u * 5 * 5 * 4096);
  CHECK(l.ll_slot_stride >= 2 * 1024 + 32);
  CHECK(l.has_staging());
  std::byte* base = nullptr;
  // the slot of step k is step % slots; distinct (worker, peer) pairs never share slots
  CHECK(l.data(base, 1, 2, 7) == l.data(base, 1, 2, 2));
  CHECK(l.data(base, 1, 2, 0) != l.data(base, 2, 1, 0));
  CHECK(l.data(base, 2, 4, 4) + 4096 <= base + l.ll_off);
  // LL slots: rounded up to a power of two (8 for 5), the step masked; every slot of every channel
  // distinct and inside the LL section
  CHECK(l.ll_slots == 8);
  CHECK(l.stage_off - l.ll_off == 3u * 5 * 8 * l.ll_slot_stride);
  CHECK(l.ll(base, 1, 2, 13) == l.ll(base, 1, 2, 5));
  CHECK(l.ll(base, 1, 2, 13) != l.ll(base, 1, 2, 8));
  CHECK(l.ll(base, 1, 2, (std::uint64_t{1} << 40) + 3) == l.ll(base, 1, 2, 3));
  std::set<const std::uint64_t*> seen;
  for (unsigned w = 0; w < 3; ++w)
    for (int src = 0; src < 5; ++src)
      for (std::uint64_t step = 0; step < 8; ++step) {
        const auto* p = l.ll(base, w, src, step);
        CHECK(seen.insert(p).second);
        CHECK(reinterpret_cast<const std::byte*>(p) >= base + l.ll_off);
        CHECK(reinterpret_cast<const std::byte*>(p) + l.ll_slot_stride <= base + l.stage_off);
      }
  CHECK(l.stage(base, 2, 4, 4) + 4096 == base + l.total);
  c.staging = false;
  CHECK_FALSE(ark::make_layout(5, c).has_staging());
  c.max_depth = 0;
  CHECK_THROWS_AS(ark::make_layout(2, c), ark::invalid_argument);
  c.max_depth = 2;
  c.slot_bytes = 100;
  CHECK_THROWS_AS(ark::make_layout(2, c), ark::invalid_argument);
}

TEST_CASE("split: every part is aligned, the parts tile the range, every rank computes the same") {
  for (std::size_t len : {0ul, 1ul, 7ul, 64ul, 1001ul})
    for (unsigned parts : {1u, 3u, 8u}) {
      std::size_t next = 5;
      for (unsigned i = 0; i < parts; ++i) {
        const ark::elem_range r = ark::split({5, len}, parts, i, 4);
        CHECK(r.begin == next);
        CHECK((r.begin - 5) % 4 == 0);
        next = r.end();
      }
      CHECK(next == 5 + len);
    }
}
