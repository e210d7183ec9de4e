// ark/internode/bootstrap_engine.hpp: the reference inter-node engine: a rail's collectives
// through its bootstrap's all_gather, reduced on the host in node order (every node reduces the
// same values in the same order, so every node holds the same result). Any bootstrap serves,
// so it runs wherever ark does, bounded by the bootstrap's timeout; it moves every byte through
// the bootstrap's root and gathers whole inputs, so it is the engine of tests and of small jobs,
// not of bandwidth: mpi_engine (or a user's) is.
//
//   ark::hierarchical_communicator<ark::platform::host, ark::bootstrap_engine> comm(boot);
#pragma once

#include "ark/bootstrap/any.hpp"
#include "ark/internode/engine.hpp"

#include <cstring>
#include <vector>

namespace ark {

class bootstrap_engine {
public:
  /// Over a rail's bootstrap (hierarchical_communicator passes the one it split off).
  template <bootstrap Boot>
  explicit bootstrap_engine(Boot rail) : boot_(std::move(rail)) {}

  int rank() { return boot_.rank(); }
  int size() { return boot_.size(); }

  void all_reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r) {
    detail::check_engine_reduction(r, "bootstrap_engine::all_reduce");
    const std::size_t bytes = count * size_of(t);
    gather(in, bytes);
    reduce_block(out, count, t, r, 0, bytes);
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, dtype t, engine_reduction r) {
    detail::check_engine_reduction(r, "bootstrap_engine::reduce_scatter");
    const std::size_t bytes = count * size_of(t);
    gather(in, bytes * static_cast<std::size_t>(size()));
    reduce_block(out, count, t, r, static_cast<std::size_t>(rank()) * bytes, bytes * size());
  }

  void all_gather(const void* in, void* out, std::size_t bytes) {
    gather(in, bytes);
    if (bytes) std::memcpy(out, all_.data(), all_.size());
  }

  void broadcast(const void* in, void* out, std::size_t bytes, int root) {
    detail::check_root("bootstrap_engine::broadcast", root, size());
    gather(rank() == root ? in : nullptr, bytes);
    if (bytes) std::memmove(out, all_.data() + static_cast<std::size_t>(root) * bytes, bytes);
  }

  void reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r, int root) {
    detail::check_engine_reduction(r, "bootstrap_engine::reduce");
    detail::check_root("bootstrap_engine::reduce", root, size());
    const std::size_t bytes = count * size_of(t);
    gather(in, bytes);
    if (rank() == root) reduce_block(out, count, t, r, 0, bytes);
  }

  void all_to_all(const void* in, void* out, std::size_t bytes) {
    const std::size_t n = static_cast<std::size_t>(size());
    gather(in, bytes * n); // every node's whole input: this node keeps block rank() of each
    for (std::size_t j = 0; j < n && bytes; ++j)
      std::memcpy(static_cast<std::byte*>(out) + j * bytes,
                  all_.data() + (j * n + static_cast<std::size_t>(rank())) * bytes, bytes);
  }

private:
  /// Every rank's `bytes` at `in` (zeros for a null `in`) into all_, rank r's at r * bytes.
  void gather(const void* in, std::size_t bytes) {
    mine_.assign(bytes, std::byte{0});
    if (in && bytes) std::memcpy(mine_.data(), in, bytes);
    all_.resize(bytes * static_cast<std::size_t>(size()));
    boot_.all_gather(mine_.data(), all_.data(), bytes);
  }
  /// out = the reduction over ranks of the `count` elements at `offset` in each rank's gathered
  /// `stride` bytes.
  void reduce_block(void* out, std::size_t count, dtype t, engine_reduction r, std::size_t offset,
                    std::size_t stride) {
    with_dtype(t, [&](auto e) {
      using T = decltype(e);
      std::vector<const T*> srcs(static_cast<std::size_t>(size()));
      for (int j = 0; j < size(); ++j)
        srcs[j] = reinterpret_cast<const T*>(all_.data() + static_cast<std::size_t>(j) * stride + offset);
      detail::reduce_on_host<T>(srcs.data(), size(), static_cast<T*>(out), count, r);
    });
  }

  any_bootstrap boot_;
  std::vector<std::byte> mine_, all_;
};

static_assert(internode_engine<bootstrap_engine>);

} // namespace ark
