// ark/concepts/bootstrap.hpp: how ranks find each other before they share memory.
//
// A bootstrap B, for an lvalue b:
//   1. b.rank() and b.size() give this rank and the number of ranks (int);
//   2. b.all_gather(in, out, n) copies n bytes from every rank's `in` into every rank's `out`,
//      rank r's bytes at out + r * n; every rank passes the same n; it throws ark::timeout_error
//      when a rank does not arrive within the bootstrap's bound, never hangs;
//   3. b.barrier() returns once every rank called it (same bound).
// It is used only while a communicator is built and torn down, never on the data path.
// Models (ark/bootstrap/): in_process_bootstrap (threads of one process), unix_socket_bootstrap
// (processes of one node), tcp_bootstrap (processes on any machines), mpi_bootstrap (processes
// started by mpirun; include it yourself).
//
// A splittable_bootstrap also has b.split(color, key): collective over every rank of b, it
// returns a bootstrap (of b's type) over the ranks that passed the same color (>= 0), ranked by
// key, then by their rank in b, as MPI_Comm_split does. Its waits have b's bound. The
// hierarchical communicator splits a job's bootstrap into nodes and rails this way.
#pragma once

#include "ark/core/error.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ark {

template <class B>
concept bootstrap = requires(B& b, const void* in, void* out, std::size_t n) {
  { b.rank() } -> std::same_as<int>;
  { b.size() } -> std::same_as<int>;
  { b.all_gather(in, out, n) } -> std::same_as<void>;
  { b.barrier() } -> std::same_as<void>;
};

template <class B>
concept splittable_bootstrap = bootstrap<B> && requires(B& b, int color) {
  { b.split(color, color) } -> std::same_as<B>;
};

namespace detail {

/// Where this rank lands in a split: its new rank, the new world's size, and which old rank is
/// the new group's rank 0 (the rule of splittable_bootstrap).
struct split_place {
  int rank = 0, size = 0;
  int leader = 0; ///< the old rank of the new group's rank 0
};

/// The first step of every gathering bootstrap's split: refuses a negative color (before any
/// rank waits), gathers every rank's (color, key) and places this rank.
template <bootstrap B>
split_place gather_split(B& b, int color, int key, const char* call) {
  if (color < 0) throw_invalid(call, "color must be >= 0");
  struct card {
    std::int32_t color, key;
  };
  const int world = b.size(), me = b.rank();
  std::vector<card> all(world);
  const card mine{color, key};
  b.all_gather(&mine, all.data(), sizeof mine);
  auto before = [&](int x, int y) { return all[x].key < all[y].key || (all[x].key == all[y].key && x < y); };
  split_place p;
  p.leader = me;
  for (int r = 0; r < world; ++r) {
    if (all[r].color != color) continue;
    ++p.size;
    if (before(r, me)) ++p.rank;
    if (before(r, p.leader)) p.leader = r;
  }
  return p;
}

} // namespace detail

} // namespace ark
