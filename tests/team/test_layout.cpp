// The symmetric region's layout (team/layout.hpp): sections in order and disjoint, slots wrap, bad
// sizes rejected; and split (team/context.hpp), which divides a range among workers.
#include "ark/team/context.hpp"
#include "ark/team/layout.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include <set>
#include <string>

TEST_CASE("layout: sections are ordered, disjoint and sized by the configuration") {
  ark::team_config c;
  c.workers = 3;
  c.max_depth = 4;
  c.slot_bytes = 4096;
  c.ll_slot_bytes = 1024;
  c.p2p_workers = 2; // workers 3 and 4, after the collectives'
  const ark::layout l = ark::make_layout(5, c);
  CHECK(l.slots == 5);
  CHECK(l.all_workers() == 5);
  CHECK(l.p2p_worker(1) == 4);
  CHECK(l.max_depth() == 4);
  CHECK(l.head_off < l.ack_off);
  CHECK(l.ack_off < l.bar_off);
  CHECK(l.hdr_off < l.data_off);
  // channels for the peers only: 5 workers x 4 peers x 5 slots
  CHECK(l.peers() == 4);
  CHECK(l.ll_off - l.data_off == 5u * 4 * 5 * 4096);
  // the point-to-point workers' step counters: one per peer and direction, inside their section
  CHECK(l.state_off < l.pair_off);
  CHECK(l.pair_off < l.ce_off);
  CHECK(reinterpret_cast<std::byte*>(l.pair_step(nullptr, 1, 4, true) + 1) <=
        static_cast<std::byte*>(nullptr) + l.ce_off);
  CHECK(l.pair_step(nullptr, 1, 4, true) != l.pair_step(nullptr, 1, 4, false));
  CHECK(l.pair_step(nullptr, 0, 4, true) != l.pair_step(nullptr, 1, 0, false));
  CHECK(l.ll_slot_stride >= 2 * 1024 + 32);
  CHECK(l.has_staging());
  std::byte* base = nullptr;
  // every (owner, peer) pair of a worker has its own channel, numbered from 0 without gaps
  for (int owner = 0; owner < 5; ++owner) {
    std::set<std::uint64_t> links;
    for (int peer = 0; peer < 5; ++peer)
      if (peer != owner) {
        const ark::link k = l.link_of(2, owner, peer);
        CHECK(links.insert(k.index).second);
        CHECK(ark::layout::peer_of(owner, unsigned(k.index - 2 * l.peers())) == peer);
      }
    CHECK(*links.begin() == 2 * l.peers());
    CHECK(*links.rbegin() == 3 * l.peers() - 1);
  }
  // the slot of step k is step % slots; distinct channels never share slots
  const ark::link a = l.link_of(1, 0, 2), b = l.link_of(2, 1, 0), last = l.link_of(4, 4, 3);
  CHECK(l.data(base, a, 7) == l.data(base, a, 2));
  CHECK(l.data(base, a, 0) != l.data(base, b, 0));
  CHECK(l.data(base, last, 4) + 4096 == base + l.ll_off);
  // LL slots: rounded up to a power of two (8 for 5), the step masked; every slot of every channel
  // distinct and inside the LL section
  CHECK(l.ll_slots == 8);
  CHECK(l.stage_off - l.ll_off == 5u * 4 * 8 * l.ll_slot_stride);
  CHECK(l.ll(base, a, 13) == l.ll(base, a, 5));
  CHECK(l.ll(base, a, 13) != l.ll(base, a, 8));
  CHECK(l.ll(base, a, (std::uint64_t{1} << 40) + 3) == l.ll(base, a, 3));
  std::set<const std::uint64_t*> seen;
  for (unsigned w = 0; w < 5; ++w)
    for (int src = 0; src < 5; ++src)
      for (std::uint64_t step = 0; src != 3 && step < 8; ++step) {
        const auto* p = l.ll(base, l.link_of(w, 3, src), step);
        CHECK(seen.insert(p).second);
        CHECK(reinterpret_cast<const std::byte*>(p) >= base + l.ll_off);
        CHECK(reinterpret_cast<const std::byte*>(p) + l.ll_slot_stride <= base + l.stage_off);
      }
  CHECK(seen.size() == 5u * 4 * 8);
  CHECK(l.stage(base, last, 4) + 4096 == base + l.total);
  c.staging = false;
  CHECK_FALSE(ark::make_layout(5, c).has_staging());
  c.max_depth = 0;
  CHECK_THROWS_AS(ark::make_layout(2, c), ark::invalid_argument);
  c.max_depth = 2;
  c.slot_bytes = 100;
  CHECK_THROWS_AS(ark::make_layout(2, c), ark::invalid_argument);
}

TEST_CASE("layout: automatic slots fit the scratch budget at every world, sixteen workers' slots first") {
  ark::team_config c;
  c.workers = 128;
  c.max_depth = 4;
  c.slot_bytes = 0;
  c.ll_slot_bytes = 16 << 10;
  c.scratch_budget = 64 << 20;
  c.p2p_workers = 2; // fixed here (explicit slots take the same); their automatic count: below
  const std::size_t least = ark::team_config::auto_slot_least, most = ark::team_config::auto_slot_most;
  auto with = [&](int world, unsigned workers, std::size_t slot) {
    auto e = c;
    e.workers = workers;
    e.slot_bytes = slot;
    return ark::make_layout(world, e).total;
  };
  for (bool staging : {false, true})
    for (int world : {1, 2, 3, 4, 5, 8, 16, 64}) {
      CAPTURE(staging);
      CAPTURE(world);
      c.staging = staging;
      const ark::layout l = ark::make_layout(world, c);
      CHECK(l.total <= c.scratch_budget);
      CHECK(l.workers >= 1);
      CHECK(l.workers <= c.workers);
      CHECK(l.slot_bytes <= most);
      if (with(world, 1, least) > c.scratch_budget) { // one worker, its slots as large as fit
        CHECK(l.workers == 1);
        CHECK(l.slot_bytes % 256 == 0);
        CHECK(with(world, 1, l.slot_bytes + 256) > c.scratch_budget);
        continue;
      }
      CHECK(l.slot_bytes % 4096 == 0);
      CHECK(l.slot_bytes >= least);
      const unsigned floor = std::min(c.workers, ark::team_config::auto_workers_least);
      if (with(world, floor, least) <= c.scratch_budget) {
        // the floor's largest slots that fit, then the most workers of that size
        CHECK(l.workers >= floor);
        if (l.slot_bytes < most) CHECK(with(world, floor, l.slot_bytes + 4096) > c.scratch_budget);
        if (l.workers < c.workers) CHECK(with(world, l.workers + 1, l.slot_bytes) > c.scratch_budget);
      } else {
        // fewer fit: the most workers whose slots of `least` bytes fit, then their largest slots
        CHECK(l.workers < floor);
        if (l.workers < c.workers) CHECK(with(world, l.workers + 1, least) > c.scratch_budget);
        if (l.slot_bytes < most) CHECK(with(world, l.workers, l.slot_bytes + 4096) > c.scratch_budget);
      }
      // the same region as the explicit configuration it chose
      CHECK(with(world, l.workers, l.slot_bytes) == l.total);
    }
  c.staging = false;
  // a budget above what every worker's largest slots take: all of them, the largest slots
  c.scratch_budget = std::size_t{1} << 40;
  CHECK(ark::make_layout(2, c).workers == 128);
  CHECK(ark::make_layout(2, c).slot_bytes == most);
  // a budget below one worker's slots of `least` bytes: one worker, smaller slots
  c.scratch_budget = with(2, 1, least) - 1;
  const ark::layout one = ark::make_layout(2, c);
  CHECK(one.workers == 1);
  CHECK(one.slot_bytes < least);
  CHECK(one.slot_bytes % 256 == 0);
  CHECK(one.total <= c.scratch_budget);
  CHECK(with(2, 1, one.slot_bytes + 256) > c.scratch_budget);
  // a budget below one worker's slots of 256 bytes: refused, saying what it takes
  c.scratch_budget = with(2, 1, 256) - 1;
  std::string refusal;
  try {
    (void)ark::make_layout(2, c);
  } catch (const ark::invalid_argument& e) {
    refusal = e.what();
  }
  CHECK(refusal.find("scratch_budget of " + std::to_string(c.scratch_budget)) != std::string::npos);
  CHECK(refusal.find("takes " + std::to_string(with(2, 1, 256))) != std::string::npos);
  // automatic slots need a budget; explicit slots ignore it
  c.scratch_budget = 0;
  CHECK_THROWS_AS(ark::make_layout(2, c), ark::invalid_argument);
  c.slot_bytes = 512 << 10;
  c.scratch_budget = 1 << 20;
  CHECK(ark::make_layout(8, c).workers == 128);
  CHECK(ark::make_layout(8, c).total > c.scratch_budget);
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

TEST_CASE("layout: the point-to-point workers, automatic and explicit") {
  ark::team_config c; // the GPU default's shape: automatic slots in a budget
  c.workers = 128;
  c.slot_bytes = 0;
  c.scratch_budget = 64 << 20;
  c.max_depth = 4;
  c.ll_slot_bytes = 16 << 10;
  c.staging = false;
  for (int world : {1, 2, 3, 4, 8, 16}) {
    CAPTURE(world);
    const ark::layout l = ark::make_layout(world, c);
    ark::team_config none = c; // the budget's workers without them, with slots of the least size
    none.p2p_workers = 0;
    none.slot_bytes = ark::team_config::auto_slot_least;
    unsigned alone = 0;
    for (unsigned n = 1; n <= c.workers; ++n) {
      none.workers = n;
      if (ark::make_layout(world, none).total <= c.scratch_budget) alone = n;
    }
    CHECK(l.total <= c.scratch_budget);
    CHECK(l.p2p == std::clamp(alone / 5, 1u, 16u));
    CHECK(l.workers >= 1);
    ark::team_config three = c;
    three.p2p_workers = 3;
    CHECK(ark::make_layout(world, three).p2p == 3);
  }
  ark::team_config e; // explicit slots: 2 unless given
  e.slot_bytes = 4096;
  CHECK(ark::make_layout(2, e).p2p == 2);
  e.p2p_workers = 0;
  CHECK(ark::make_layout(2, e).p2p == 0);
  CHECK(ark::make_layout(2, e).all_workers() == e.workers);
  e.p2p_workers = 1025;
  CHECK_THROWS_AS(ark::make_layout(2, e), ark::invalid_argument);
}
