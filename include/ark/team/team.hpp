// ark/team/team.hpp: the ranks of a communicator and where each rank's symmetric region lives in
// this rank's address space. `team_view` is the trivially copyable handle kernels receive by value.
#pragma once

#include "ark/team/control.hpp"
#include "ark/team/layout.hpp"

#include <cstdint>
#include <type_traits>

namespace ark {

struct team_view {
  int rank = 0;
  int world = 0;
  std::uint64_t timeout_ns = 0; ///< a wait that makes no progress this long fails (P::now_ns()'s units)
  control_block* ctl = nullptr; ///< this rank's control block (device-visible address)
  /// This rank's DMA-engine memory (device address) and how its engine serves it: the transport
  /// layer's, opaque to the team (dma/engine_queue.hpp).
  std::byte* engine = nullptr;
  std::uint32_t engine_mode = 0;
  layout lay;
  std::byte* base[max_world] = {}; ///< rank r's region, mapped into this rank's address space

  ARK_HD std::byte* local() const { return base[rank]; }
};

static_assert(std::is_trivially_copyable_v<team_view>);

} // namespace ark
