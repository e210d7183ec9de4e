// The call description (team/call_desc.hpp): the first field in which two ranks' calls differ,
// and the 32-bit tag LL packets carry in its place.
#include "ark/team/call_desc.hpp"

#include <doctest/doctest.h>

#include <random>
#include <set>

TEST_CASE("call_desc: the first differing field is named with both values") {
  using ark::collective;
  const auto a = ark::call_desc::make(collective::all_reduce, 1, 0, 0, 1, 4, 0, 100);
  std::uint64_t mine = 0, theirs = 0;
  CHECK(a.first_difference(a, mine, theirs) == ark::desc_field::none);
  auto b = ark::call_desc::make(collective::all_reduce, 1, 0, 0, 1, 4, 0, 101);
  CHECK(a.first_difference(b, mine, theirs) == ark::desc_field::count);
  CHECK(mine == 100);
  CHECK(theirs == 101);
  b = ark::call_desc::make(collective::all_reduce, 1, 5, 0, 1, 4, 0, 100);
  CHECK(a.first_difference(b, mine, theirs) == ark::desc_field::dtype);
  b = ark::call_desc::make(collective::all_reduce, 1, 0, 0, 1, 9, 0, 100);
  CHECK(a.first_difference(b, mine, theirs) == ark::desc_field::workers);
  CHECK(theirs == 9);
  b = ark::call_desc::make(collective::broadcast, 1, 0, 0, 1, 4, 3, 100);
  CHECK(a.first_difference(b, mine, theirs) == ark::desc_field::kind);
}

TEST_CASE("call_desc: the tag LL packets carry tells calls apart") {
  using ark::collective;
  std::mt19937_64 rng(7);
  // equal descriptions, equal tags; a count that differs in its low 32 bits, always another tag
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t count = rng() >> (rng() % 64);
    const auto op = static_cast<std::uint8_t>(rng() % 8), dtype = static_cast<std::uint8_t>(rng() % 10);
    const unsigned workers = 1 + static_cast<unsigned>(rng() % 1024);
    const auto a = ark::call_desc::make(collective::all_reduce, 1, dtype, op, 2, workers, 0, count);
    const auto same = ark::call_desc::make(collective::all_reduce, 1, dtype, op, 2, workers, 0, count);
    REQUIRE(a.tag() == same.tag());
    std::uint64_t other = count ^ (rng() & 0xffffffffu);
    if (other == count) other = count ^ 1;
    REQUIRE(ark::call_desc::make(collective::all_reduce, 1, dtype, op, 2, workers, 0, other).tag() !=
            a.tag());
  }
  // a grid of 11520 descriptions (every field varied): no two share a tag. A tag that ignored a
  // field, or let two cancel, would collide by the thousand; an ideal 32-bit hash collides
  // somewhere on this grid with odds of about 1.5 % (deterministic: the hash is fixed)
  std::set<std::uint32_t> tags;
  std::size_t n = 0;
  for (unsigned kind = 1; kind <= 6; ++kind)
    for (std::uint8_t algo = 0; algo < 4; ++algo)
      for (std::uint8_t dtype = 0; dtype < 10; ++dtype)
        for (std::uint8_t op = 0; op < 6; ++op)
          for (unsigned workers : {1u, 2u, 16u, 128u})
            for (int root : {0, 1}) {
              tags.insert(
                  ark::call_desc::make(static_cast<collective>(kind), algo, dtype, op, 2, workers, root, 4096)
                      .tag());
              ++n;
            }
  CHECK(tags.size() == n);
}

TEST_CASE("call_desc: no count difference makes the tags of two other descriptions meet") {
  // before the count was mixed first, descriptions a and b met at every count pair c, c ^ D(a, b):
  // here dtype 3 and 4 (op 5, 100 workers) met at D = 61794, for any c
  using ark::collective;
  int meets = 0;
  for (std::uint64_t c = 0; c < 4096; ++c)
    meets += ark::call_desc::make(collective::all_reduce, 1, 3, 5, 2, 100, 0, c).tag() ==
                     ark::call_desc::make(collective::all_reduce, 1, 4, 5, 2, 100, 0, c ^ 61794).tag()
                 ? 1
                 : 0;
  CHECK(meets == 0);
}

TEST_CASE("call_desc: a packet flag (step xor tag) of one call does not meet another's a few steps on") {
  // the structured case an unmixed tag had: counts whose low words differ by the xor of two
  // nearby steps' flags (e.g. 100 and 106 with steps 5 and 7) gave equal second-half flags
  using ark::collective;
  int meets = 0;
  for (std::uint64_t c1 = 1; c1 < 600; ++c1)
    for (std::uint64_t d = 1; d < 64; ++d) {
      const std::uint64_t c2 = c1 ^ d;
      const auto t1 = ark::call_desc::make(collective::all_reduce, 1, 0, 0, 2, 2, 0, c1).tag();
      const auto t2 = ark::call_desc::make(collective::all_reduce, 1, 0, 0, 2, 2, 0, c2).tag();
      for (std::uint32_t s1 = 1; s1 < 64; ++s1)
        for (std::uint32_t k = 1; k <= 8; ++k) meets += ((s1 ^ t1) == ((s1 + 2 * k) ^ t2)) ? 1 : 0;
    }
  CHECK(meets == 0);
}
