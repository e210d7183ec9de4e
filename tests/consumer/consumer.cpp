// A program of a project that uses ark (host platform: two ranks as threads): one all-reduce.
// Built by scripts/test as a Meson subproject's parent, over pkg-config (g++ and nvcc) and through
// CMake's find_package.
#include "ark/ark.hpp"

#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

int main() {
  constexpr int world = 2;
  auto group = std::make_shared<ark::in_process_group>(world);
  std::vector<float> last(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      ark::communicator<ark::platform::host> comm(ark::in_process_bootstrap(group, r));
      std::vector<float> x(1000, static_cast<float>(r + 1));
      comm.all_reduce(x.data(), x.data(), x.size());
      last[r] = x.back();
    });
  for (auto& t : ranks) t.join();
  const bool ok = last[0] == 3.0f && last[1] == 3.0f;
  std::printf("consumer: an all-reduce through ark: %s\n", ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
