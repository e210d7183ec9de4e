// ark/dma/dma.hpp: the DMA backends available on every platform, and the defaults.
#pragma once

#include "ark/concepts/dma_backend.hpp"
#include "ark/dma/proxy_engine.hpp"
#include "ark/dma/ll_packet.hpp"
#include "ark/dma/thread_copy.hpp"
#include "ark/dma/tma.hpp"

namespace ark {

/// The pipeline depth used when a call names no backend.
inline constexpr unsigned default_depth = 4;

namespace dma {
/// Chosen at run time: LL packets for small messages, thread copies above.
struct automatic {
  static constexpr std::uint8_t id = 0;
  static constexpr unsigned depth = default_depth;
};
} // namespace dma

static_assert(dma_backend<dma::thread_copy<1>> && dma_backend<dma::ll_packet<8>> &&
              dma_backend<dma::proxy_engine<2>> && dma_backend<dma::tma<4>>);

} // namespace ark
