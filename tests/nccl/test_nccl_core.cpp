// The NCCL API's core (apps/nccl/core.hpp) on the host platform, each rank a thread: ids and
// rendezvous, every call, data type and op against a reference, groups (several ranks driven by
// one thread, sends and receives in any order), splits, user ops, memory, and the errors.
#include "nccl/core.hpp"
#include "nccl/on_ranks.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using host = ark::platform::host;
using ncomm = ark::nccl::comm<host>;
using ark::nccl::data_type;
using ark::nccl::result;
namespace nc = ark::nccl;
using ark_test::on_ranks;

constexpr data_type all_types[] = {data_type::i8,  data_type::u8,  data_type::i32, data_type::u32,
                                   data_type::i64, data_type::u64, data_type::f16, data_type::f32,
                                   data_type::f64, data_type::bf16};
constexpr int sum = 0, prod = 1, max = 2, min = 3, avg = 4;

bool is_float(data_type t) {
  return t == data_type::f16 || t == data_type::f32 || t == data_type::f64 || t == data_type::bf16;
}

/// Writes v (a small integer or its quarter) as type t at p[i].
void put(data_type t, void* p, std::size_t i, double v) {
  auto* b = static_cast<std::byte*>(p) + i * nc::size_of(t);
  auto store = [b](auto x) { std::memcpy(b, &x, sizeof x); };
  switch (t) {
  case data_type::i8:
    return store(static_cast<std::int8_t>(v));
  case data_type::u8:
  case data_type::f8e4m3: // moved, never reduced here: any bits serve
  case data_type::f8e5m2:
    return store(static_cast<std::uint8_t>(v));
  case data_type::i32:
    return store(static_cast<std::int32_t>(v));
  case data_type::u32:
    return store(static_cast<std::uint32_t>(v));
  case data_type::i64:
    return store(static_cast<std::int64_t>(v));
  case data_type::u64:
    return store(static_cast<std::uint64_t>(v));
  case data_type::f16:
    return store(ark::fp16(static_cast<float>(v)));
  case data_type::f32:
    return store(static_cast<float>(v));
  case data_type::f64:
    return store(v);
  default:
    return store(ark::bf16(static_cast<float>(v)));
  }
}
double get(data_type t, const void* p, std::size_t i) {
  const auto* b = static_cast<const std::byte*>(p) + i * nc::size_of(t);
  auto load = [b](auto x) {
    std::memcpy(&x, b, sizeof x);
    return x;
  };
  switch (t) {
  case data_type::i8:
    return load(std::int8_t{});
  case data_type::u8:
  case data_type::f8e4m3:
  case data_type::f8e5m2:
    return load(std::uint8_t{});
  case data_type::i32:
    return load(std::int32_t{});
  case data_type::u32:
    return static_cast<double>(load(std::uint32_t{}));
  case data_type::i64:
    return static_cast<double>(load(std::int64_t{}));
  case data_type::u64:
    return static_cast<double>(load(std::uint64_t{}));
  case data_type::f16:
    return static_cast<float>(load(ark::fp16{}));
  case data_type::f32:
    return load(float{});
  case data_type::f64:
    return load(double{});
  default:
    return static_cast<float>(load(ark::bf16{}));
  }
}
/// Rank r's element i: 1 to 3, exact in every type, so sums and products are exact too.
double value(int r, std::size_t i) { return static_cast<double>((r * 5 + i * 3) % 3 + 1); }

double reduced(int op, data_type t, int world, std::size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < world; ++r) {
    const double v = value(r, i);
    acc = op == prod ? acc * v : op == max ? std::max(acc, v) : op == min ? std::min(acc, v) : acc + v;
  }
  if (op == avg) acc = is_float(t) ? acc / world : std::trunc(acc / world);
  return acc;
}

std::vector<std::byte> filled(data_type t, int r, std::size_t n, std::size_t offset = 0) {
  std::vector<std::byte> v(n * nc::size_of(t));
  for (std::size_t i = 0; i < n; ++i) put(t, v.data(), i, value(r, i + offset));
  return v;
}
std::vector<std::byte> poisoned(data_type t, std::size_t n) {
  return std::vector<std::byte>(n * nc::size_of(t), std::byte{0x5a});
}

} // namespace

TEST_CASE("nccl: unique ids name distinct rendezvous; ids of another library are refused") {
  std::set<std::string> paths;
  for (int i = 0; i < 50; ++i) paths.insert(nc::path_of(nc::make_id(), "test"));
  CHECK(paths.size() == 50);
  nc::unique_id foreign{};
  std::memset(foreign.internal, 7, sizeof foreign.internal);
  ncomm* c = reinterpret_cast<ncomm*>(1);
  CHECK(nc::init_rank<host>(&c, 2, foreign, 0, {}) == result::invalid_argument);
  CHECK(c == nullptr);
  CHECK(nc::last_error_text().find("ncclGetUniqueId") != std::string::npos);
  // a split's id: the same on every member, another for each split and color
  auto derived = [](std::uint64_t split, int color) {
    return nc::path_of(nc::derived_id("/tmp/arknccl-1", split, color), "t");
  };
  CHECK(derived(3, 1) == derived(3, 1));
  CHECK(derived(3, 1) != derived(3, 2));
  CHECK(derived(3, 1) != derived(4, 1));
  CHECK(derived(3, 1).rfind("/tmp/arknccl-", 0) == 0);
}

TEST_CASE("nccl: which reductions ark serves, and in which of its types") {
  using K = ark::op::dynamic::kind;
  CHECK(nc::reduced_as(data_type::f32, K::max) == ark::dtype::f32);
  CHECK(nc::reduced_as(data_type::bf16, K::avg) == ark::dtype::bf16);
  CHECK(nc::reduced_as(data_type::i8, K::max) == ark::dtype::i8);
  CHECK(nc::reduced_as(data_type::u32, K::prod) == ark::dtype::i32);
  CHECK(nc::reduced_as(data_type::u64, K::sum) == ark::dtype::i64);
  CHECK_FALSE(nc::reduced_as(data_type::u64, K::max).has_value());
  CHECK_FALSE(nc::reduced_as(data_type::u32, K::avg).has_value());
  CHECK_FALSE(nc::reduced_as(data_type::f8e4m3, K::sum).has_value());
  CHECK(std::string(nc::error_string(result::remote_error)).find("remote") != std::string::npos);
}

TEST_CASE("nccl: all_reduce, reduce_scatter and reduce of every type and op, worlds 1-4") {
  for (int world : {1, 2, 3, 4}) {
    CAPTURE(world);
    on_ranks(world, [world](int r, ncomm* c) {
      const std::size_t n = 37;
      for (data_type t : all_types)
        for (int op : {sum, prod, max, min, avg}) {
          const std::string type = nc::name_of(t);
          CAPTURE(type);
          CAPTURE(op);
          const bool served = nc::reduced_as(t, c->op_of(op, t, "t").k).has_value();
          auto in = filled(t, r, n), out = poisoned(t, n);
          const result res = nc::all_reduce<host>(in.data(), out.data(), n, t, op, c, nullptr);
          if (!served) { // refused before anything runs, on every rank alike
            REQUIRE(res == result::invalid_argument);
            CHECK(nc::last_error_text().find("does not reduce") != std::string::npos);
            CHECK(out == poisoned(t, n));
            continue;
          }
          REQUIRE_MESSAGE(res == result::success, nc::last_error_text());
          for (std::size_t i = 0; i < n; ++i)
            REQUIRE(get(t, out.data(), i) == doctest::Approx(reduced(op, t, world, i)).epsilon(0.01));
          // reduce_scatter: block r of the reduced world blocks
          auto rs_in = filled(t, r, n * world), rs_out = poisoned(t, n);
          REQUIRE(nc::reduce_scatter<host>(rs_in.data(), rs_out.data(), n, t, op, c, nullptr) ==
                  result::success);
          for (std::size_t i = 0; i < n; ++i)
            REQUIRE(get(t, rs_out.data(), i) ==
                    doctest::Approx(reduced(op, t, world, r * n + i)).epsilon(0.01));
          // reduce to the last rank, in place there
          const int root = world - 1;
          auto red = filled(t, r, n);
          REQUIRE(nc::reduce<host>(red.data(), red.data(), n, t, op, root, c, nullptr) == result::success);
          for (std::size_t i = 0; i < n; ++i)
            REQUIRE(get(t, red.data(), i) ==
                    doctest::Approx(r == root ? reduced(op, t, world, i) : value(r, i)).epsilon(0.01));
        }
    });
  }
}

TEST_CASE("nccl: all_gather, broadcast, all_to_all, gather, scatter move any type, worlds 1-3") {
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    on_ranks(world, [world](int r, ncomm* c) {
      for (data_type t : {data_type::i8, data_type::f16, data_type::u32, data_type::f8e5m2, data_type::u64}) {
        const std::string type = nc::name_of(t);
        CAPTURE(type);
        const std::size_t n = 13;
        auto in = filled(t, r, n), out = poisoned(t, n * world);
        REQUIRE(nc::all_gather<host>(in.data(), out.data(), n, t, c, nullptr) == result::success);
        for (int p = 0; p < world; ++p)
          for (std::size_t i = 0; i < n; ++i) REQUIRE(get(t, out.data(), p * n + i) == value(p, i));
        const int root = world / 2;
        auto b = r == root ? filled(t, r, n) : poisoned(t, n);
        REQUIRE(nc::broadcast<host>(b.data(), b.data(), n, t, root, c, nullptr) == result::success);
        for (std::size_t i = 0; i < n; ++i) REQUIRE(get(t, b.data(), i) == value(root, i));
        // all_to_all: block p of rank r's input (values of rank r at offset p * n) lands as block r on p
        auto a_in = filled(t, r, n * world), a_out = poisoned(t, n * world);
        REQUIRE(nc::all_to_all<host>(a_in.data(), a_out.data(), n, t, c, nullptr) == result::success);
        for (int q = 0; q < world; ++q)
          for (std::size_t i = 0; i < n; ++i) REQUIRE(get(t, a_out.data(), q * n + i) == value(q, r * n + i));
        auto g_out = poisoned(t, n * world);
        REQUIRE(nc::gather<host>(in.data(), g_out.data(), n, t, root, c, nullptr) == result::success);
        if (r == root)
          for (int p = 0; p < world; ++p)
            for (std::size_t i = 0; i < n; ++i) REQUIRE(get(t, g_out.data(), p * n + i) == value(p, i));
        auto s_in = filled(t, r, n * world), s_out = poisoned(t, n);
        REQUIRE(nc::scatter<host>(s_in.data(), s_out.data(), n, t, root, c, nullptr) == result::success);
        for (std::size_t i = 0; i < n; ++i) REQUIRE(get(t, s_out.data(), i) == value(root, r * n + i));
        // zero elements: nothing moves, and that is no error
        REQUIRE(nc::all_gather<host>(in.data(), out.data(), 0, t, c, nullptr) == result::success);
      }
    });
  }
}

TEST_CASE("nccl: a group of sends and receives in any order cannot deadlock (ring shift, all pairs, self)") {
  for (int world : {1, 2, 3, 4}) {
    CAPTURE(world);
    on_ranks(world, [world](int r, ncomm* c) {
      const data_type t = data_type::f32;
      const std::size_t n = 1000;
      // ring shift: receive first on every rank, which alone would deadlock
      auto mine = filled(t, r, n), got = poisoned(t, n);
      const int next = (r + 1) % world, prev = (r + world - 1) % world;
      REQUIRE(nc::group_start<host>() == result::success);
      REQUIRE(nc::recv<host>(got.data(), n, t, prev, c, nullptr) == result::success);
      REQUIRE(nc::send<host>(mine.data(), n, t, next, c, nullptr) == result::success);
      REQUIRE_MESSAGE(nc::group_end<host>() == result::success, nc::last_error_text());
      for (std::size_t i = 0; i < n; ++i) REQUIRE(get(t, got.data(), i) == value(prev, i));
      // all pairs, this rank included, as an all-to-all of uneven counts (r + p + 1 elements)
      std::vector<std::vector<std::byte>> outs(world), ins(world);
      REQUIRE(nc::group_start<host>() == result::success);
      for (int p = 0; p < world; ++p) {
        ins[p] = filled(data_type::i32, r, r + p + 1, 100 * p);
        outs[p] = poisoned(data_type::i32, p + r + 1);
        REQUIRE(nc::send<host>(ins[p].data(), r + p + 1, data_type::i32, p, c, nullptr) == result::success);
        REQUIRE(nc::recv<host>(outs[p].data(), p + r + 1, data_type::i32, p, c, nullptr) == result::success);
      }
      REQUIRE_MESSAGE(nc::group_end<host>() == result::success, nc::last_error_text());
      for (int p = 0; p < world; ++p)
        for (int i = 0; i < p + r + 1; ++i)
          REQUIRE(get(data_type::i32, outs[p].data(), i) == value(p, 100 * r + i));
    });
  }
}

TEST_CASE("nccl: one communicator's collectives in a group (coalesced) run batched, in call order, one "
          "launch a kind") {
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    on_ranks(world, [world](int r, ncomm* c) {
      const data_type t = data_type::bf16;
      const std::size_t counts[] = {1, 300, 4099};
      std::vector<std::vector<std::byte>> in(3), out(3);
      auto gathered = poisoned(data_type::i32, 40 * world), shifted = poisoned(data_type::i32, 40);
      const auto mine = filled(data_type::i32, r, 40);
      const int next = (r + 1) % world, prev = (r + world - 1) % world;
      const std::uint64_t before = c->ark("test").launches();
      REQUIRE(nc::group_start<host>() == result::success);
      for (int k = 0; k < 3; ++k) {
        in[k] = filled(t, r, counts[k]);
        out[k] = poisoned(t, counts[k]);
        // the last with another op: still the same batch (an op at run time travels with its call)
        REQUIRE(nc::all_reduce<host>(in[k].data(), out[k].data(), counts[k], t, k == 2 ? max : sum, c,
                                     nullptr) == result::success);
        if (k == 0)
          REQUIRE(nc::recv<host>(shifted.data(), 40, data_type::i32, prev, c, nullptr) == result::success);
      }
      REQUIRE(nc::all_gather<host>(mine.data(), gathered.data(), 40, data_type::i32, c, nullptr) ==
              result::success);
      REQUIRE(nc::send<host>(mine.data(), 40, data_type::i32, next, c, nullptr) == result::success);
      CHECK(out[0] == poisoned(t, counts[0])); // deferred to the group's end
      REQUIRE_MESSAGE(nc::group_end<host>() == result::success, nc::last_error_text());
      // the all-reduces (one batch), the all-gather, the send and receive
      CHECK(c->ark("test").launches() - before == 3);
      for (int k = 0; k < 3; ++k)
        for (std::size_t i = 0; i < counts[k]; ++i)
          REQUIRE(get(t, out[k].data(), i) == reduced(k == 2 ? max : sum, t, world, i));
      for (int p = 0; p < world; ++p)
        for (std::size_t i = 0; i < 40; ++i)
          REQUIRE(get(data_type::i32, gathered.data(), p * 40 + i) == value(p, i));
      for (std::size_t i = 0; i < 40; ++i) REQUIRE(get(data_type::i32, shifted.data(), i) == value(prev, i));
    });
  }
}

TEST_CASE("nccl: one thread drives every rank (ncclCommInitAll, grouped inits and calls)") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    std::vector<ncomm*> comms(world, nullptr);
    REQUIRE_MESSAGE(nc::init_all<host>(comms.data(), world, nullptr) == result::success,
                    nc::last_error_text());
    const data_type t = data_type::bf16;
    const std::size_t n = 300;
    std::vector<std::vector<std::byte>> in(world), out(world);
    REQUIRE(nc::group_start<host>() == result::success);
    for (int r = 0; r < world; ++r) {
      in[r] = filled(t, r, n);
      out[r] = poisoned(t, n);
      REQUIRE(nc::all_reduce<host>(in[r].data(), out[r].data(), n, t, sum, comms[r], nullptr) ==
              result::success);
      CHECK(out[r] == poisoned(t, n)); // deferred to the group's end
    }
    REQUIRE_MESSAGE(nc::group_end<host>() == result::success, nc::last_error_text());
    for (int r = 0; r < world; ++r)
      for (std::size_t i = 0; i < n; ++i) REQUIRE(get(t, out[r].data(), i) == reduced(sum, t, world, i));
    // NCCL's own pattern: grouped ncclCommInitRank, one per rank, from this thread
    const nc::unique_id id = nc::make_id();
    std::vector<ncomm*> more(world, nullptr);
    REQUIRE(nc::group_start<host>() == result::success);
    for (int r = 0; r < world; ++r)
      REQUIRE(nc::init_rank<host>(&more[r], world, id, r, {}) == result::success);
    REQUIRE_MESSAGE(nc::group_end<host>() == result::success, nc::last_error_text());
    for (int r = 0; r < world; ++r) REQUIRE(more[r]->ready());
    // destroyed in turn by this one thread: teardown waits for every rank off this thread
    for (auto* c : comms) CHECK(nc::destroy<host>(c, false) == result::success);
    for (auto* c : more) CHECK(nc::destroy<host>(c, false) == result::success);
    nc::reaper<host>::get().join();
  }
}

TEST_CASE("nccl: split by color and key; NCCL_SPLIT_NOCOLOR gets no communicator; shrink") {
  on_ranks(4, [](int r, ncomm* c) {
    ncomm* half = nullptr;
    // even and odd ranks, ordered by descending rank
    REQUIRE_MESSAGE(nc::split<host>(c, r % 2, -r, &half, {}) == result::success, nc::last_error_text());
    REQUIRE(half);
    CHECK(half->world() == 2);
    CHECK(half->rank() == (r < 2 ? 1 : 0));
    std::int32_t v = r, total = 0;
    REQUIRE(nc::all_reduce<host>(&v, &total, 1, data_type::i32, sum, half, nullptr) == result::success);
    CHECK(total == (r % 2 ? 1 + 3 : 0 + 2));
    ncomm* none = reinterpret_cast<ncomm*>(1);
    REQUIRE(nc::split<host>(c, r == 0 ? 0 : nc::split_nocolor, 0, &none, {}) == result::success);
    CHECK((r == 0) == (none != nullptr));
    if (none) CHECK(none->world() == 1);
    const int excluded[] = {1};
    ncomm* shrunk = nullptr;
    REQUIRE_MESSAGE(nc::shrink<host>(c, excluded, 1, &shrunk, {}) == result::success, nc::last_error_text());
    CHECK((r == 1) == (shrunk == nullptr));
    if (shrunk) {
      CHECK(shrunk->world() == 3);
      CHECK(shrunk->rank() == (r == 0 ? 0 : r - 1));
      std::int32_t one = 1, n = 0;
      REQUIRE(nc::all_reduce<host>(&one, &n, 1, data_type::i32, sum, shrunk, nullptr) == result::success);
      CHECK(n == 3);
    }
    for (auto* x : {half, none, shrunk}) nc::destroy<host>(x, false);
  });
}

TEST_CASE("nccl: PreMulSum ops, by value and in memory, per communicator") {
  on_ranks(3, [](int r, ncomm* c) {
    int op = -1;
    const float factor = 0.5f;
    REQUIRE(nc::create_premul_sum<host>(&op, &factor, data_type::f32, nc::scalar_residence::host_immediate,
                                        c) == result::success);
    CHECK(op >= nc::builtin_op_count);
    float in[4] = {1.0f + r, 2, 3, 4}, out[4] = {};
    REQUIRE(nc::all_reduce<host>(in, out, 4, data_type::f32, op, c, nullptr) == result::success);
    CHECK(out[0] == doctest::Approx(0.5 * (1 + 2 + 3)));
    CHECK(out[3] == doctest::Approx(0.5 * 12));
    // a factor in memory is read when the call runs
    std::int64_t at = 2;
    int op2 = -1;
    REQUIRE(nc::create_premul_sum<host>(&op2, &at, data_type::i64, nc::scalar_residence::device, c) ==
            result::success);
    at = 3;
    std::int64_t v = r + 1, w = 0;
    REQUIRE(nc::all_reduce<host>(&v, &w, 1, data_type::i64, op2, c, nullptr) == result::success);
    CHECK(w == 3 * (1 + 2 + 3));
    // the op is for its type only; destroyed, it is gone
    CHECK(nc::all_reduce<host>(in, out, 4, data_type::f64, op, c, nullptr) == result::invalid_argument);
    CHECK(nc::last_error_text().find("made for float32") != std::string::npos);
    REQUIRE(c->op_of(op, data_type::f32, "t").k == ark::op::dynamic::kind::premul_sum);
    c->remove_op(op, "t");
    CHECK(nc::all_reduce<host>(in, out, 4, data_type::f32, op, c, nullptr) == result::invalid_argument);
    int op3 = -1;
    CHECK(nc::create_premul_sum<host>(&op3, &factor, data_type::f8e4m3, nc::scalar_residence::host_immediate,
                                      c) == result::invalid_argument);
  });
}

TEST_CASE("nccl: bad calls are errors before anything runs, outputs untouched") {
  on_ranks(2, [](int r, ncomm* c) {
    float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    CHECK(nc::all_reduce<host>(in, out, 8, data_type::f32, sum, nullptr, nullptr) ==
          result::invalid_argument);
    CHECK(nc::all_reduce<host>(in, out, 8, static_cast<data_type>(42), sum, c, nullptr) ==
          result::invalid_argument);
    CHECK(nc::all_reduce<host>(in, out, 8, data_type::f32, 77, c, nullptr) == result::invalid_argument);
    CHECK(nc::broadcast<host>(in, out, 8, data_type::f32, 5, c, nullptr) == result::invalid_argument);
    CHECK(nc::last_error_text().find("root") != std::string::npos);
    CHECK(nc::send<host>(in, 8, data_type::f32, 9, c, nullptr) == result::invalid_argument);
    CHECK(nc::last_error_text().find("peer") != std::string::npos);
    CHECK(nc::all_reduce<host>(in + 0, reinterpret_cast<float*>(reinterpret_cast<char*>(out) + 1), 2,
                               data_type::f32, sum, c, nullptr) == result::invalid_argument);
    for (float x : out) CHECK(x == -1);
    CHECK(nc::group_end<host>() == result::invalid_usage);
    // a send to this rank needs its receive in the same group
    REQUIRE(nc::group_start<host>() == result::success);
    REQUIRE(nc::send<host>(in, 8, data_type::f32, r, c, nullptr) == result::success);
    CHECK(nc::group_end<host>() == result::invalid_argument);
    CHECK(nc::last_error_text().find("receive from this rank") != std::string::npos);
    // the communicator still works after refused calls
    REQUIRE(nc::all_reduce<host>(in, out, 8, data_type::f32, sum, c, nullptr) == result::success);
    CHECK(out[7] == 16);
    result async = result::internal_error;
    REQUIRE(nc::async_error<host>(c, &async) == result::success);
    CHECK(async == result::success);
  });
}

TEST_CASE("nccl: abort ends a wait for a peer that never comes; the async error and last error say so") {
  const nc::unique_id id = nc::make_id();
  ncomm* comms[2] = {};
  std::thread peer([&] { REQUIRE(nc::init_rank<host>(&comms[1], 2, id, 1, {}) == result::success); });
  REQUIRE(nc::init_rank<host>(&comms[0], 2, id, 0, {}) == result::success);
  peer.join();
  // ncclGetLastError(comm) from a thread whose own calls all succeeded: the comm's async error
  auto fresh_thread_reads = [&] {
    std::string text;
    std::thread([&] { text = nc::last_error<host>(comms[0]); }).join();
    return text;
  };
  CHECK(fresh_thread_reads().empty());
  float x = 1;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    comms[0]->ark("t").abort();
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(nc::all_reduce<host>(&x, &x, 1, data_type::f32, sum, comms[0], nullptr) == result::remote_error);
  aborter.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4)); // not ark's 5 s wait
  result async = result::success;
  REQUIRE(nc::async_error<host>(comms[0], &async) == result::success);
  CHECK(async == result::remote_error);
  const std::string text = fresh_thread_reads();
  CHECK_MESSAGE(text.find("rank 0: aborted") != std::string::npos, text);
  CHECK(nc::destroy<host>(comms[0], true) == result::success);
  CHECK(nc::destroy<host>(comms[1], true) == result::success);
  nc::reaper<host>::get().join();
}

TEST_CASE("nccl: ncclMemAlloc memory registers as a window; foreign pointers are refused") {
  on_ranks(2, [](int r, ncomm* c) {
    void* p = nullptr;
    REQUIRE(nc::mem_alloc<host>(&p, 4096) == result::success);
    REQUIRE(p);
    void* win = nullptr;
    REQUIRE_MESSAGE(nc::window_register<host>(c, p, 4096, &win) == result::success, nc::last_error_text());
    auto* f = static_cast<float*>(p);
    for (int i = 0; i < 1024; ++i) f[i] = static_cast<float>(r + i);
    REQUIRE(nc::all_reduce<host>(f, f, 1024, data_type::f32, max, c, nullptr) == result::success);
    CHECK(f[5] == 6);
    REQUIRE(nc::window_deregister<host>(c, win) == result::success);
    REQUIRE(nc::mem_free<host>(p) == result::success);
    int local = 0;
    CHECK(nc::mem_free<host>(&local) == result::invalid_argument);
  });
}

TEST_CASE("nccl: where ranks share a device, ncclMemFree frees once their teardowns are done") {
  auto& mem = nc::allocations<host>::get();
  REQUIRE(mem.kept() == 0);
  ncomm* comms[2] = {};
  const int devices[2] = {0, 0}; // the host platform's one device (current_device: 0), both ranks
  REQUIRE_MESSAGE(nc::init_all<host>(comms, 2, devices) == result::success, nc::last_error_text());
  void* p = nullptr;
  REQUIRE(nc::mem_alloc<host>(&p, 4096) == result::success);
  CHECK(nc::mem_free<host>(p) == result::success);
  CHECK(mem.kept() == 1);                                   // a free now could stall a peer's call
  CHECK(nc::mem_free<host>(p) == result::invalid_argument); // released once, kept or not
  CHECK(nc::destroy<host>(comms[0], false) == result::success);
  CHECK(nc::destroy<host>(comms[1], false) == result::success);
  nc::reaper<host>::get().join();
  CHECK(mem.kept() == 0); // both torn down: freed
  // a rank's own communicators on its device (the world's and a split's): no sharing, freed at once
  on_ranks(1, [&](int, ncomm* c) {
    ncomm* half = nullptr;
    REQUIRE(nc::split<host>(c, 0, 0, &half, {}) == result::success);
    REQUIRE(nc::mem_alloc<host>(&p, 64) == result::success);
    CHECK(nc::mem_free<host>(p) == result::success);
    CHECK(mem.kept() == 0);
    nc::destroy<host>(half, false);
  });
}

TEST_CASE("nccl: a teardown's frees wait for the launches inside the gate and hold new ones off") {
  auto& gate = nc::launch_gate::get();
  std::atomic<bool> began{false}, ended{false};
  std::optional<std::thread> freer;
  {
    const nc::launch_gate::inside launching;
    freer.emplace([&] {
      gate.alone([&] {
        began = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ended = true;
      });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(began.load()); // a launch is inside: the free waits
  }
  while (!began) std::this_thread::yield();
  {
    const nc::launch_gate::inside next; // enters only once the free is over
    CHECK(ended.load());
  }
  freer->join();
  // many launches and frees at once: a free never runs with a launch inside, and every free runs
  std::atomic<int> launching{0}, freeing{0}, overlaps{0}, frees{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        const nc::launch_gate::inside in;
        ++launching;
        overlaps += freeing.load();
        --launching;
      }
    });
  std::thread frees_thread([&] {
    for (int i = 0; i < 200; ++i)
      gate.alone([&] {
        ++freeing;
        overlaps += launching.load();
        --freeing;
        ++frees;
      });
  });
  for (auto& t : ts) t.join();
  frees_thread.join();
  CHECK(overlaps.load() == 0);
  CHECK(frees.load() == 200);
}
