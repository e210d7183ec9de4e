// The NCCL API's fallback (apps/nccl/forward.hpp) on the host platform: a call ark does not serve
// goes to the real library (here tests/nccl/fake_nccl.cpp, whose reductions complement their input)
// on a twin communicator made from rank 0's id; a call ark serves never reaches it; forbidden
// forwarding, a missing library and a library that is not NCCL are errors saying so, outputs untouched;
// a call no library could serve (a bad comm, type or op) is the call's own error, never forwarded.
#include "nccl/forward.hpp"
#include "nccl/on_ranks.hpp"

#include <doctest/doctest.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using host = ark::platform::host;
using ark::nccl::data_type;
using ark::nccl::result;
using ark_test::ncomm;
using ark_test::on_ranks;
namespace nc = ark::nccl;

constexpr int sum = 0, max = 2;
constexpr int nccl_uint32 = 3;

/// What the fake's twin of rank r was asked (its layout, tests/nccl/fake_nccl.cpp).
struct asked {
  int calls, world, type, op, root;
  std::size_t count;
  char id[128];
};
const asked& asked_of(int rank) {
  void* lib = ::dlopen(ARK_TEST_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL | RTLD_DEEPBIND);
  REQUIRE(lib);
  auto f = reinterpret_cast<const asked* (*)(int)>(::dlsym(lib, "fake_nccl_asked"));
  REQUIRE(reinterpret_cast<void*>(f) != nullptr);
  ::dlclose(lib); // the forward still holds it
  return *f(rank);
}

nc::settings with(const char* library, bool fallback = true) {
  nc::settings s;
  s.library = library;
  s.fallback = fallback;
  return s;
}

/// uint32 max: a reduction ark does not serve (its unsigned types reduce as signed: sum and prod only).
result uint32_max(nc::forward<host>& to, ncomm* c, const std::vector<std::uint32_t>& in,
                  std::vector<std::uint32_t>& out) {
  return nc::serve_or_forward(
      to, "ncclAllReduce", c, data_type::u32, max, nullptr,
      nc::all_reduce_work<host>(in.data(), out.data(), in.size()), [&](nc::real_nccl& n, void* twin) {
        return n.all_reduce(in.data(), out.data(), in.size(), nccl_uint32, max, twin, nullptr);
      });
}

} // namespace

TEST_CASE("nccl forward: what ark does not reduce runs on the real NCCL, on a twin made from rank 0's id") {
  nc::forward<host> to(with(ARK_TEST_FAKE_NCCL));
  on_ranks(3, [&](int r, ncomm* c) {
    REQUIRE_FALSE(nc::plan_reduction(c, data_type::u32, max, "t").as);
    REQUIRE(nc::plan_reduction(c, data_type::u32, sum, "t").as);
    const std::vector<std::uint32_t> in{7u + r, 0u, 0xfffffff0u, 12345u, 1u};
    for (int call = 1; call <= 2; ++call) { // the twin is made once
      std::vector<std::uint32_t> out(in.size(), 0x5a5a5a5au);
      REQUIRE_MESSAGE(uint32_max(to, c, in, out) == result::success, nc::last_error_text());
      for (std::size_t i = 0; i < in.size(); ++i) CHECK(out[i] == ~in[i]); // the fake's work
      const asked& a = asked_of(r);
      CHECK(a.calls == call);
      CHECK(a.world == 3);
      CHECK(a.type == nccl_uint32);
      CHECK(a.op == max);
      CHECK(a.count == in.size());
      CHECK(std::memcmp(a.id, "fake\x01", 5) == 0); // rank 0's id, on every rank
    }
    // uint32 sum: ark's, the fake never asked
    std::vector<std::uint32_t> out(in.size(), 0x5a5a5a5au);
    REQUIRE(nc::serve_or_forward(to, "ncclAllReduce", c, data_type::u32, sum, nullptr,
                                 nc::all_reduce_work<host>(in.data(), out.data(), in.size()),
                                 [&](nc::real_nccl&, void*) { return 3; }) == result::success);
    CHECK(out[0] == (7u + 8u + 9u));
    CHECK(out[1] == 0u);
    CHECK(out[3] == 3u * 12345u);
    CHECK(asked_of(r).calls == 2);
    to.release(c, false);
  });
}

TEST_CASE(
    "nccl forward: forbidden, missing or not NCCL: an error naming the call and why, output untouched") {
  struct setup {
    nc::settings s;
    const char* says;
  };
  const setup setups[] = {
      {with(ARK_TEST_FAKE_NCCL, false), "forbidden (ARK_NCCL_FALLBACK=0)"},
      {with("/nonexistent/libnccl.so.2"), "/nonexistent/libnccl.so.2"},
      {with("libm.so.6"), "lacks NCCL's functions"},
  };
  for (const setup& x : setups) {
    CAPTURE(x.says);
    nc::forward<host> to(x.s);
    on_ranks(2, [&](int r, ncomm* c) {
      const std::vector<std::uint32_t> in(4, 3u + r);
      std::vector<std::uint32_t> out(in.size(), 0x5a5a5a5au);
      REQUIRE(uint32_max(to, c, in, out) == result::invalid_usage);
      const std::string text = nc::last_error_text();
      CHECK(text.find("ncclAllReduce") != std::string::npos);
      CHECK_MESSAGE(text.find(x.says) != std::string::npos, text);
      CHECK(out == std::vector<std::uint32_t>(in.size(), 0x5a5a5a5au));
    });
  }
}

TEST_CASE("nccl forward: inside a group a call ark does not serve is refused, saying so; the group goes on") {
  nc::forward<host> to(with(ARK_TEST_FAKE_NCCL));
  on_ranks(2, [&](int r, ncomm* c) {
    const std::vector<std::uint32_t> in(6, 5u + r);
    std::vector<std::uint32_t> out(in.size(), 0x5a5a5a5au), summed(in.size(), 0x5a5a5a5au);
    REQUIRE(nc::group_start<host>() == result::success);
    REQUIRE(uint32_max(to, c, in, out) == result::invalid_usage);
    CHECK(nc::last_error_text().find("inside ncclGroupStart/End") != std::string::npos);
    REQUIRE(nc::all_reduce<host>(in.data(), summed.data(), in.size(), data_type::u32, sum, c, nullptr) ==
            result::success);
    REQUIRE(nc::group_end<host>() == result::success);
    CHECK(out == std::vector<std::uint32_t>(in.size(), 0x5a5a5a5au));
    CHECK(summed == std::vector<std::uint32_t>(in.size(), 11u));
  });
}

TEST_CASE(
    "nccl forward: what no library could serve (a NULL comm, a type or op that is not NCCL's, a user op "
    "of another type) is the call's own error, never forwarded, output untouched") {
  nc::forward<host> to(with(ARK_TEST_FAKE_NCCL));
  on_ranks(2, [&](int, ncomm* c) {
    const std::vector<std::uint32_t> in(4, 1u);
    std::vector<std::uint32_t> out(in.size(), 0x5a5a5a5au);
    int forwarded = 0;
    const float factor = 2.0f;
    int f32_op = -1; // a user op made for float
    REQUIRE(nc::create_premul_sum<host>(&f32_op, &factor, data_type::f32,
                                        nc::scalar_residence::host_immediate, c) == result::success);
    struct bad {
      ncomm* comm;
      data_type t;
      int op;
      const char* says;
    };
    const bad cases[] = {
        {nullptr, data_type::u32, max, "comm is NULL"},
        {c, static_cast<data_type>(99), max, "is not an NCCL type"},
        {c, data_type::u32, 99, "neither built in nor a user op"},
        {c, data_type::u32, f32_op, "the user op was made for float32"},
    };
    for (const bad& b : cases) { // uint32 max alone would be forwarded: ark does not reduce it
      CAPTURE(b.says);
      CHECK(nc::serve_or_forward(to, "ncclAllReduce", b.comm, b.t, b.op, nullptr,
                                 nc::all_reduce_work<host>(in.data(), out.data(), in.size()),
                                 [&](nc::real_nccl&, void*) { return ++forwarded, 0; }) ==
            result::invalid_argument);
      const std::string text = nc::last_error_text();
      CHECK(text.find("ncclAllReduce") != std::string::npos);
      CHECK_MESSAGE(text.find(b.says) != std::string::npos, text);
    }
    CHECK(forwarded == 0);
    CHECK(out == std::vector<std::uint32_t>(in.size(), 0x5a5a5a5au));
  });
}
