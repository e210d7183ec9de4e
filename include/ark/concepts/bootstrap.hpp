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
// (processes of one node), mpi_bootstrap (processes started by mpirun; include it yourself).
#pragma once

#include <concepts>
#include <cstddef>

namespace ark {

template <class B>
concept bootstrap = requires(B& b, const void* in, void* out, std::size_t n) {
  { b.rank() } -> std::same_as<int>;
  { b.size() } -> std::same_as<int>;
  { b.all_gather(in, out, n) } -> std::same_as<void>;
  { b.barrier() } -> std::same_as<void>;
};

} // namespace ark
