// ark/ark.hpp: everything ark offers, in one include.
//
// Layers, bottom to top (docs/architecture.md):
//   concepts/     device, scope, dma_backend, reduce_op, bootstrap: the contracts
//   platform/     models of `device`: host (CPU threads), cuda, hip; and the models of `scope`
//                 their launches construct: host_team, block_scope
//   team/         symmetric-region layout, the team handle, the per-call context
//   dma/          models of `dma_backend`: thread_copy, ll_packet, proxy_engine, tma (sm_90)
//   algorithms/   one-shot, two-shot, ring, direct: written once against the concepts
//   collectives/  device_comm (called from kernels) and what a launch runs
//   communicator/ communicator (called from the host), over its runtime, checks, planner,
//                 registry, engines and copy-engine protocol
#pragma once

#include "ark/config.hpp"

#include "ark/concepts/bootstrap.hpp"
#include "ark/concepts/device.hpp"
#include "ark/concepts/dma_backend.hpp"
#include "ark/concepts/reduce_op.hpp"
#include "ark/concepts/scope.hpp"

#include "ark/core/dtype.hpp"
#include "ark/core/error.hpp"
#include "ark/core/float16.hpp"
#include "ark/ops/builtin.hpp"
#include "ark/ops/dynamic.hpp"

#include "ark/platform/platform.hpp"

#include "ark/algorithms/algorithms.hpp"
#include "ark/bootstrap/in_process.hpp"
#include "ark/bootstrap/tcp.hpp"
#include "ark/bootstrap/unix_socket.hpp"
#include "ark/communicator/communicator.hpp"
#include "ark/hierarchy/communicator.hpp"
#include "ark/internode/bootstrap_engine.hpp"
#include "ark/collectives/device_comm.hpp"
#include "ark/dma/dma.hpp"
