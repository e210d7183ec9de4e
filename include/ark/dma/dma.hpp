// ark/dma/dma.hpp: the DMA backends available on every platform, and the defaults.
#pragma once

#include "ark/concepts/dma_backend.hpp"
#include "ark/dma/proxy_engine.hpp"
#include "ark/dma/ll_packet.hpp"
#include "ark/dma/thread_copy.hpp"
#include "ark/dma/tma.hpp"

namespace ark {

/// The pipeline depth used when a call names no backend: a sender runs at most two steps ahead
/// of what its receiver finished. Deeper pipelines moved no more bytes a second at any slot size
/// or world measured, and each step of depth costs every channel a slot (docs/perf.md,
/// "Pipeline depth").
inline constexpr unsigned default_depth = 2;

namespace dma {
/// Chosen at run time: LL packets for small messages, thread copies above.
struct automatic {
  static constexpr std::uint8_t id = 0;
  static constexpr unsigned depth = default_depth;
};

/// The copy engine alone moves the bytes, straight into registered recv buffers, ordered by
/// stream memory operations (collectives/copy_engine.hpp): all_reduce (plus one short reduction
/// kernel on a bounded number of blocks), all_gather and broadcast. Not a channel backend: it
/// is a host-API choice, not usable from device code.
struct copy_engine {
  static constexpr std::uint8_t id = 5;
  static constexpr unsigned depth = 1;
};
} // namespace dma

static_assert(dma_backend<dma::thread_copy<1>> && dma_backend<dma::ll_packet<8>> &&
              dma_backend<dma::proxy_engine<2>> && dma_backend<dma::tma<4>>);

} // namespace ark
