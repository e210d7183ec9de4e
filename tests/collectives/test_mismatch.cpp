// A call that fails because the ranks disagree (count, op, dtype) fails on every rank with a
// mismatch_error, well before the timeout, and leaves every rank's buffers as they were: the
// output byte for byte, and the input too (in place, input and output are one buffer). Every
// collective x algorithm x backend, at two and three ranks (four for the ring, where a rank's
// neighbours need not be the odd one). The copy-engine paths, which carry a hash of the call in
// their flags and no description, time out instead (docs/guide.md, "What a mismatch looks like").
#include "../support/collective_check.hpp"

#include <chrono>
#include <type_traits>

using namespace ark_test;
using namespace std::chrono_literals;

namespace {

/// How the odd rank's call differs from the others'.
enum class differ { count, op, dtype };

ark::desc_field field_of(differ how) {
  return how == differ::count ? ark::desc_field::count
         : how == differ::op  ? ark::desc_field::op
                              : ark::desc_field::dtype;
}

/// Long enough that a wait which runs to it stands out; a mismatch must end every rank's call
/// well before it.
constexpr auto call_bound = 6s;
constexpr auto prompt = 3s;

comm_t::config mismatch_config() {
  auto cfg = small_config(4); // 4 threads: a share of up to 8 floats takes the LL latency path
  cfg.timeout = call_bound;
  return cfg;
}

/// One case: every rank calls K with `count` elements but the odd one (the last rank), which
/// calls with `odd_count`, or with another op or dtype.
struct mismatch_case {
  differ how = differ::count;
  std::size_t count = 40, odd_count = 39;
  int root = 0;
  bool in_place = false;
};

/// What one rank saw: its buffers' bytes before and after the call, how long the call took.
struct rank_outcome {
  std::vector<unsigned char> before, after;
  std::chrono::milliseconds took{};
};

template <class T>
void append_bytes(std::vector<unsigned char>& to, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  to.insert(to.end(), p, p + v.size() * sizeof(T));
}

/// One rank's call of K (algorithm A, backend B) on T elements combined with Op: inputs from
/// input<T, Op>, outputs poisoned; the bytes of every buffer the call was given, before and after.
template <ark::collective K, class A, class B, class T, class Op>
void call_rank(comm_t& c, int rank, std::size_t n, const mismatch_case& mc, rank_outcome& o) {
  const int world = c.world();
  const std::size_t nin = in_elems<K>(n, world), nout = out_elems<K>(n, world);
  const bool has_input = K != ark::collective::broadcast || rank == mc.root;
  std::vector<T> in(nin), out(nout + guard), buf;
  for (std::size_t i = 0; i < nin; ++i) in[i] = input<T, Op>(7, rank, i);
  poison(out, 0xa5);
  T *src = in.data(), *dst = out.data();
  if (mc.in_place) {
    buf.resize(std::max(nin, nout) + guard);
    poison(buf, 0xa5);
    const std::size_t in_off = K == ark::collective::all_gather ? rank * n : 0;
    const std::size_t out_off = K == ark::collective::reduce_scatter ? rank * n : 0;
    if (has_input) std::copy(in.begin(), in.end(), buf.begin() + in_off);
    src = buf.data() + in_off, dst = buf.data() + out_off;
    append_bytes(o.before, buf);
  } else {
    append_bytes(o.before, in);
    append_bytes(o.before, out);
  }
  const auto t0 = std::chrono::steady_clock::now();
  struct timed { // however the call ends
    rank_outcome& o;
    std::chrono::steady_clock::time_point t0;
    ~timed() {
      o.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    }
  };
  const timed at_exit{o, t0};
  struct snapshot { // the buffers' bytes after the call, however it ends
    rank_outcome& o;
    const std::vector<T>&in, &out, &buf;
    bool in_place;
    ~snapshot() {
      if (in_place) {
        append_bytes(o.after, buf);
      } else {
        append_bytes(o.after, in);
        append_bytes(o.after, out);
      }
    }
  };
  const snapshot at_end{o, in, out, buf, mc.in_place};
  call<K, A, B, T, Op>(c, src, dst, n, mc.root);
}

/// A ring all-reduce or reduce-scatter of three ranks or more: a rank whose ring neighbours match
/// its call never reads the odd call, and nobody tells it (docs/guide.md, "What a mismatch looks like"):
/// it may wait out the timeout, kept short here.
template <ark::collective K, class A>
bool may_time_out(int world) {
  return std::is_same_v<A, ark::algo::ring> && world >= 3 &&
         (K == ark::collective::all_reduce || K == ark::collective::reduce_scatter);
}
constexpr auto short_bound = 500ms;

/// Runs one case on a fresh world (a failed call leaves a communicator unusable) and checks that
/// every rank threw a mismatch_error naming the field, in time, its buffers untouched (where
/// may_time_out: at least one rank; the others a mismatch_error or a timeout_error).
template <ark::collective K, class A, class B>
void check_mismatch(int world, const mismatch_case& mc) {
  const int odd = world - 1;
  const bool timeouts_allowed = may_time_out<K, A>(world);
  std::vector<rank_outcome> outcomes(world);
  auto cfg = mismatch_config();
  if (timeouts_allowed) cfg.timeout = short_bound;
  test_world w(world, cfg);
  const auto errs = w.try_run([&](comm_t& c, int rank) {
    const bool is_odd = rank == odd;
    const std::size_t n = is_odd && mc.how == differ::count ? mc.odd_count : mc.count;
    if (is_odd && mc.how == differ::dtype)
      call_rank<K, A, B, std::int32_t, ark::op::sum>(c, rank, n, mc, outcomes[rank]);
    else if (is_odd && mc.how == differ::op)
      call_rank<K, A, B, float, ark::op::max>(c, rank, n, mc, outcomes[rank]);
    else
      call_rank<K, A, B, float, ark::op::sum>(c, rank, n, mc, outcomes[rank]);
  });
  const ark::desc_field field = field_of(mc.how);
  INFO(std::string(ark::to_string(K)), " ", std::string(A::name), " backend ", int(B::id), " depth ",
       B::depth, " world ", world, " differ ", std::string(ark::to_string(field)), " count ", mc.count,
       " odd ", mc.odd_count, " root ", mc.root, std::string(mc.in_place ? " in place" : ""));
  int mismatches = 0;
  for (int r = 0; r < world; ++r) { // every check goes on after a failed one: the whole picture
    CAPTURE(r);
    bool timed_out = false;
    if (!errs[r]) {
      FAIL_CHECK("no error");
    } else {
      try {
        std::rethrow_exception(errs[r]);
      } catch (const ark::mismatch_error& e) {
        ++mismatches;
        CHECK(e.record().what == static_cast<std::uint32_t>(field));
        CHECK(e.record().peer != r);
        CHECK(contains(e.what(), ark::to_string(field)));
      } catch (const ark::timeout_error& e) {
        timed_out = true;
        if (!timeouts_allowed) FAIL_CHECK("expected a mismatch_error, got: " << std::string(e.what()));
      } catch (const std::exception& e) {
        FAIL_CHECK("expected a mismatch_error, got: " << std::string(e.what()));
      }
    }
    if (!timed_out) CHECK(outcomes[r].took < prompt);
    const auto& o = outcomes[r];
    REQUIRE(o.before.size() == o.after.size());
    std::size_t first_changed = o.before.size();
    for (std::size_t i = 0; i < o.before.size() && first_changed == o.before.size(); ++i)
      if (o.before[i] != o.after[i]) first_changed = i;
    CHECK_MESSAGE(first_changed == o.before.size(),
                  "buffer byte " << first_changed << " of " << o.before.size() << " was written");
  }
  CHECK(mismatches >= (timeouts_allowed ? 1 : world));
}

/// The counts every case tries: one LL piece, several pieces of either protocol (more steps than
/// the depth: credits are waited for). At one step per worker the all-reduce adds a share that
/// fits the LL latency path (check_all_reduce).
const std::pair<std::size_t, std::size_t> count_pairs[] = {{40, 39}, {1000, 999}};

using backends = type_list<ark::dma::thread_copy<1>, ark::dma::ll_packet<1>, ark::dma::proxy_engine<1>,
                           ark::dma::thread_copy<4>, ark::dma::ll_packet<4>, ark::dma::proxy_engine<4>>;

/// Every count pair, in place and not, for every root the case distinguishes (the odd rank as
/// root, and another), and an op or dtype that differs where K has one.
template <ark::collective K, class A, class B>
void check_cases(int world, std::initializer_list<std::pair<std::size_t, std::size_t>> counts) {
  constexpr bool rooted = K == ark::collective::broadcast || K == ark::collective::reduce;
  for (const int root : rooted ? std::vector<int>{0, world - 1} : std::vector<int>{0})
    for (const bool in_place : {false, true}) {
      for (const auto& [n, odd] : counts)
        check_mismatch<K, A, B>(world, {differ::count, n, odd, root, in_place});
      const std::size_t n = counts.begin()->first;
      check_mismatch<K, A, B>(world, {differ::dtype, n, n, root, in_place});
      if constexpr (K == ark::collective::all_reduce || K == ark::collective::reduce_scatter ||
                    K == ark::collective::reduce)
        check_mismatch<K, A, B>(world, {differ::op, n, n, root, in_place});
    }
}

template <ark::collective K, class A>
void check_backends(std::initializer_list<int> worlds) {
  for (const int world : worlds)
    for_each_type(backends{}, [&](auto b) {
      check_cases<K, A, decltype(b)>(world, {count_pairs[0], count_pairs[1]});
    });
}

} // namespace

TEST_CASE("mismatch: all_reduce, every algorithm and backend: a mismatch_error (a ring's: on one rank at "
          "least), nothing written") {
  using ark::collective;
  SUBCASE("one_shot") { check_backends<collective::all_reduce, ark::algo::one_shot>({2, 3}); }
  SUBCASE("two_shot") { check_backends<collective::all_reduce, ark::algo::two_shot>({2, 3}); }
  SUBCASE("ring") { check_backends<collective::all_reduce, ark::algo::ring>({2, 3, 4}); }
  SUBCASE("LL latency path: one_shot and one_step, a share of one step") {
    for (const int world : {2, 3}) {
      check_cases<collective::all_reduce, ark::algo::one_shot, ark::dma::ll_packet<1>>(world, {{8, 7}});
      check_cases<collective::all_reduce, ark::algo::one_step, ark::dma::ll_packet<1>>(world, {{8, 7}});
      check_cases<collective::all_reduce, ark::algo::one_step, ark::dma::ll_packet<4>>(world, {{8, 7}});
    }
  }
}

TEST_CASE("mismatch: reduce_scatter, every algorithm and backend: a mismatch_error (a ring's: on one rank "
          "at least), nothing written") {
  using ark::collective;
  SUBCASE("direct") { check_backends<collective::reduce_scatter, ark::algo::direct>({2, 3}); }
  SUBCASE("ring") { check_backends<collective::reduce_scatter, ark::algo::ring>({2, 3, 4}); }
}

TEST_CASE("mismatch: all_gather, every algorithm and backend: a mismatch_error on every rank, nothing "
          "written") {
  using ark::collective;
  SUBCASE("direct") { check_backends<collective::all_gather, ark::algo::direct>({2, 3}); }
  SUBCASE("ring") { check_backends<collective::all_gather, ark::algo::ring>({2, 3, 4}); }
}

TEST_CASE("mismatch: broadcast and reduce, every backend, the odd rank root or not: a mismatch_error on "
          "every rank, nothing written") {
  using ark::collective;
  SUBCASE("broadcast") { check_backends<collective::broadcast, ark::algo::direct>({2, 3}); }
  SUBCASE("reduce") { check_backends<collective::reduce, ark::algo::direct>({2, 3}); }
}

TEST_CASE("mismatch: a root that differs between ranks is a mismatch_error on every rank") {
  // the step of headers that opens a rooted collective carries the root, which every rank checks
  for (const int world : {2, 3}) {
    CAPTURE(world);
    for (const bool broadcast : {false, true}) {
      CAPTURE(broadcast);
      test_world w(world, mismatch_config());
      std::vector<std::vector<float>> outs(world);
      const auto errs = w.try_run([&](comm_t& c, int rank) {
        std::vector<float> in(100, 1.0f);
        outs[rank].assign(100, -7.0f);
        const int root = rank == world - 1 ? 1 : 0;
        if (broadcast)
          c.broadcast<ark::dma::thread_copy<2>>(in.data(), outs[rank].data(), 100, root);
        else
          c.reduce<ark::dma::ll_packet<2>>(in.data(), outs[rank].data(), 100, root);
      });
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        REQUIRE(errs[r]);
        CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::mismatch_error);
        for (float v : outs[r]) CHECK(v == -7.0f);
      }
    }
  }
}

TEST_CASE("mismatch: the copy-engine paths time out instead, every output untouched on the host") {
  // Their flags carry the epoch and a hash of the call, waited for by equality: a peer whose call
  // differs never satisfies a wait, and nobody learns why. A sender copies only once every
  // receiver's flag matched (communicator/ce_protocol.hpp), and on the host a failed wait stops the
  // call there: no rank writes into another's output, a broadcast's matching receiver included.
  enum { all_reduce, all_gather, broadcast };
  for (const int world : {2, 3}) {
    CAPTURE(world);
    for (const int which : {all_reduce, all_gather, broadcast}) {
      CAPTURE(which);
      auto cfg = mismatch_config();
      cfg.timeout = 200ms;
      test_world w(world, cfg);
      std::vector<std::vector<float>> outs(world);
      std::vector<std::chrono::milliseconds> took(world);
      const auto errs = w.try_run([&](comm_t& c, int rank) {
        const std::size_t n = rank == world - 1 ? 39 : 40;
        std::vector<float> in(n, 1.0f + rank);
        outs[rank].assign(40 * static_cast<std::size_t>(world), -7.0f);
        c.register_buffer(outs[rank].data(), outs[rank].size() * sizeof(float));
        using ce = ark::dma::copy_engine;
        time_until_throw(took[rank], [&] {
          if (which == all_reduce)
            c.all_reduce<ark::algo::automatic, ce>(in.data(), outs[rank].data(), n);
          else if (which == all_gather)
            c.all_gather<ark::algo::automatic, ce>(in.data(), outs[rank].data(), n);
          else
            c.broadcast<ce>(in.data(), outs[rank].data(), n, 0);
        });
      });
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        REQUIRE(errs[r]);
        CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::timeout_error);
        CHECK(took[r] >= 200ms);
        for (float v : outs[r]) CHECK(v == -7.0f);
      }
    }
  }
}
