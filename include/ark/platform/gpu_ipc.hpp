// ark/platform/gpu_ipc.hpp: what this process knows of the GPU memory it maps from peers: its own
// name among the node's processes, the peer access it enabled, and the IPC mappings it opened
// (shared per peer allocation, counted, closed with their last import).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <utility>
#include <vector>
#include <unistd.h>

namespace ark::detail {

/// Peer access enabled so far, as (device, peer): enabling it twice is reported as an error.
inline bool first_peer_access(int device, int peer) {
  static std::mutex m;
  static std::map<std::pair<int, int>, bool> enabled;
  std::lock_guard<std::mutex> lock(m);
  return !std::exchange(enabled[{device, peer}], true);
}

/// This process, named as no other process of the node names itself (a PID repeats across PID
/// namespaces: containers): made once, from the random device and the PID.
inline std::uint64_t process_token() {
  static const std::uint64_t token = [] {
    std::random_device rd;
    const std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd();
    return r ^ static_cast<std::uint64_t>(::getpid());
  }();
  return token;
}

/// A peer allocation opened through IPC in this process: CUDA opens a handle once per device
/// and context, so buffers registered inside one allocation (or a region and a buffer that share
/// one) share the mapping, which is closed when its last import is.
struct ipc_mapping {
  std::uint64_t process;   // the exporting process (its process_token())
  std::uint64_t peer_base; // the allocation's address there
  int importer;            // the GPU here that opened it
  void* base;              // the mapping here
  int refs;
};
inline std::vector<ipc_mapping>& ipc_mappings() {
  static std::vector<ipc_mapping> m;
  return m;
}
/// Each import's pointer and its mapping's base (a multimap: one buffer may be imported twice).
inline std::multimap<void*, void*>& ipc_opened() {
  static std::multimap<void*, void*> m;
  return m;
}
inline std::mutex& ipc_mutex() {
  static std::mutex m;
  return m;
}

} // namespace ark::detail
