// bench/nccl_shim_cost.cpp: what the NCCL API (apps/nccl) adds to a call on the host, apart from
// any GPU: one rank of the host platform, an all-reduce of two floats, the shim's path
// (ncclAllReduce's, on the communicator's stream: resolve the type and op, serve or forward, the
// group and launch-gate checks) against ark's own API with the same run-time op. Loops of each in
// alternation, 21 pairs; prints the median ns a call of each and the median of the pairs'
// differences. The instructions behind that difference, exactly, under callgrind (the loops are
// the functions shim_calls and ark_calls):
//   valgrind --tool=callgrind --callgrind-out-file=cg.out build/bench/nccl_shim_cost 1000
//   callgrind_annotate --inclusive=yes cg.out | grep _calls
// The host platform's collective is not the GPU's launch; the shim's own work is the same code.
#include "nccl/core.hpp"
#include "nccl/forward.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace nc = ark::nccl;
using host = ark::platform::host;

namespace {

/// calls of the shim's path; false if any failed (so that no error path is timed)
__attribute__((noinline)) bool shim_calls(nc::comm<host>* c, const float* in, float* out, int calls) {
  bool ok = true;
  for (int i = 0; i < calls; ++i)
    ok &= nc::serve_or_forward(nc::forward<host>::get(), "ncclAllReduce", c, nc::data_type::f32, 0, nullptr,
                               nc::all_reduce_work<host>(in, out, 2),
                               [](nc::real_nccl&, void*) { return 1; }) == nc::result::success;
  return ok;
}

__attribute__((noinline)) void ark_calls(ark::communicator<host>& a, const float* in, float* out, int calls) {
  for (int i = 0; i < calls; ++i)
    a.all_reduce(in, out, 2, ark::op::dynamic{ark::op::dynamic::kind::sum}, ark::call_options<host>{});
}

template <class F>
double ns_per_call(int calls, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  nc::comm<host>* c = nullptr;
  if (nc::init_rank<host>(&c, 1, nc::make_id(), 0, {}) != nc::result::success) {
    std::fprintf(stderr, "nccl_shim_cost: %s\n", nc::last_error_text().c_str());
    return 1;
  }
  ark::communicator<host>& a = c->ark("nccl_shim_cost");
  const float in[2] = {1, 2};
  float out[2] = {0, 0};
  auto summed = [&] { // one rank: the sum is the input; the output is cleared for the next check
    const bool ok = out[0] == 1 && out[1] == 2;
    out[0] = out[1] = 0;
    return ok;
  };
  bool right = shim_calls(c, in, out, 100) && summed();
  ark_calls(a, in, out, 100);
  right = summed() && right;
  std::vector<double> shim, own, diff;
  for (int pair = 0; pair < 21; ++pair) {
    const bool shim_first = pair % 2 == 0; // neither always first
    double x = 0, y = 0;
    for (int k = 0; k < 2; ++k)
      if ((k == 0) == shim_first)
        x = ns_per_call(calls, [&] { right = shim_calls(c, in, out, calls) && right; });
      else
        y = ns_per_call(calls, [&] { ark_calls(a, in, out, calls); });
    shim.push_back(x), own.push_back(y), diff.push_back(x - y);
  }
  std::printf("# %d calls a loop, 21 pairs; all-reduce of 2 floats, one rank of the host platform\n", calls);
  std::printf("%12s %12s %14s %6s\n", "shim ns", "ark ns", "shim - ark ns", "check");
  std::printf("%12.1f %12.1f %14.1f %6s\n", median(shim), median(own), median(diff), right ? "ok" : "WRONG");
  nc::destroy<host>(c, false);
  nc::reaper<host>::get().join();
  return right ? 0 : 1;
}
