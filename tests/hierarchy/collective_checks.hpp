// tests/hierarchy/collective_checks.hpp: every hierarchical collective of one type and op against
// the reference, out of place and in place (all-to-all: out of place); shared by the host test and
// the MPI program.
#pragma once

#include "../support/reference.hpp"

#include <cstring>
#include <vector>

namespace ark_test {

/// Every collective of T with Op on `count` elements, out of place and in place; returns the
/// wrong elements (and an output written where it must not be).
template <class T, class Op, class Comm>
std::size_t check_collectives(Comm& c, std::size_t count, std::uint64_t seed, int root) {
  const int W = c.world(), me = c.rank();
  const std::size_t Wc = count * W;
  std::size_t bad = 0;
  auto in_of = [&](std::size_t n) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = input<T, Op>(seed, me, i);
    return v;
  };
  auto reduced = [&](std::size_t i) {
    std::vector<T> vals(W);
    for (int q = 0; q < W; ++q) vals[q] = input<T, Op>(seed, q, i);
    return reduce_reference<T, Op>(vals);
  };
  std::vector<T> out;
  const std::vector<T> in = in_of(Wc);
  for (const bool in_place : {false, true}) {
    if (!in_place) { // all-to-all (never in place): block q of in to rank q, as block me of its out
      out.assign(Wc + 1, T{});
      ark_test::poison(out, 0xA5);
      const T guard = out.back();
      c.all_to_all(in.data(), out.data(), count);
      for (int p = 0; p < W; ++p)
        for (std::size_t i = 0; i < count; ++i) {
          const T want = input<T, Op>(seed, p, me * count + i);
          bad += std::memcmp(&out[p * count + i], &want, sizeof(T)) != 0;
        }
      bad += std::memcmp(&out[Wc], &guard, sizeof(T)) != 0;
    }
    // all-reduce
    out = in_place ? in_of(count) : std::vector<T>(count + 1);
    if (!in_place) ark_test::poison(out, 0xA5);
    const T guard = out.empty() ? T{} : out.back();
    c.all_reduce(in_place ? out.data() : in.data(), out.data(), count, Op{});
    for (std::size_t i = 0; i < count; ++i) bad += !matches(out[i], reduced(i), W);
    if (!in_place) bad += std::memcmp(&out[count], &guard, sizeof(T)) != 0;
    // reduce-scatter: block `me` reduced
    if (in_place) {
      out = in;
    } else {
      out.assign(count, T{});
      ark_test::poison(out, 0xA5);
    }
    c.reduce_scatter(in_place ? out.data() : in.data(), in_place ? out.data() + me * count : out.data(),
                     count, Op{});
    for (std::size_t i = 0; i < count; ++i)
      bad += !matches(out[(in_place ? me * count : 0) + i], reduced(me * count + i), W);
    // all-gather
    out.assign(Wc, T{});
    ark_test::poison(out, 0xA5);
    if (in_place)
      for (std::size_t i = 0; i < count; ++i) out[me * count + i] = in[i];
    c.all_gather(in_place ? out.data() + me * count : in.data(), out.data(), count);
    for (int q = 0; q < W; ++q)
      for (std::size_t i = 0; i < count; ++i) {
        const T want = input<T, Op>(seed, q, i);
        bad += std::memcmp(&out[q * count + i], &want, sizeof(T)) != 0;
      }
    // broadcast from root
    out = in_place && me == root ? in_of(count) : std::vector<T>(count);
    if (!(in_place && me == root)) ark_test::poison(out, 0xA5);
    c.broadcast(in_place && me == root ? out.data() : in.data(), out.data(), count, root);
    for (std::size_t i = 0; i < count; ++i) {
      const T want = input<T, Op>(seed, root, i);
      bad += std::memcmp(&out[i], &want, sizeof(T)) != 0;
    }
    // reduce to root; the others' out is not written
    out = in_place ? in_of(count) : std::vector<T>(count);
    if (!in_place) ark_test::poison(out, 0xA5);
    const std::vector<T> before = out;
    c.reduce(in_place ? out.data() : in.data(), out.data(), count, root, Op{});
    for (std::size_t i = 0; i < count; ++i)
      bad += me == root ? !matches(out[i], reduced(i), W) : std::memcmp(&out[i], &before[i], sizeof(T)) != 0;
  }
  return bad;
}

} // namespace ark_test
