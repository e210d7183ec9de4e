// ark/core/error.hpp: how failures travel.
//
// Device code cannot throw. A wait that runs past its deadline, a peer whose call does not match,
// or an abort is recorded in an `error_record` that lives in host-visible memory of the rank; the
// algorithm then returns early. The host side turns the record into one of the exceptions below.
// Argument errors are found on the host before anything launches and thrown at once.
#pragma once

#include "ark/config.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ark {

enum class errc : std::uint32_t {
  ok = 0,
  timeout = 1,  ///< a wait on a peer ran past its deadline
  mismatch = 2, ///< a peer's call differs from ours (count, dtype, op, algorithm, ...)
  aborted = 3,  ///< the communicator was aborted while waiting
  invalid_argument = 4,
  unsupported = 5,
  platform = 6, ///< an error reported by the platform runtime (CUDA, HIP, OS)
};

/// What a waiter was waiting for when it failed.
enum class wait_kind : std::uint32_t {
  none = 0,
  data = 1,    ///< a peer's data for a pipeline step (head flag or LL packet)
  credit = 2,  ///< a free slot in a peer's receive buffer (the peer's acknowledgement)
  barrier = 3, ///< a peer reaching a barrier
  engine = 4,  ///< a DMA engine draining its request queue
  flag = 5,    ///< a user-level flag (custom collectives)
};

/// What a device call found unsupported (error_record::what of an errc::unsupported record from
/// device_comm; the device-graph engine records its own, wait_kind::engine).
enum class unsupported_kind : std::uint32_t {
  /// a worker count, depth, staging or engine the communicator was not set up for (mine: the
  /// call's workers, theirs: team_config.workers)
  setup = 0,
  /// an algorithm that runs a worker's share in one step, given a share larger than one step
  /// carries (mine: the share's elements, theirs: the most one step carries)
  one_step = 1,
  /// an algorithm built for a team of N ranks on a team of another size (mine: N, theirs: the
  /// team's size)
  world = 2,
  /// a root outside the team, given to the device-side API (mine: the root, theirs: the team's size)
  root = 3,
  /// a point-to-point group the device-side API cannot run: a peer outside the team (mine: the
  /// peer, theirs: the team's size), or more operations than a group holds (mine: the
  /// operations, theirs: p2p_max_ops)
  p2p = 4,
};

/// Which field of a call description differed between two ranks.
enum class desc_field : std::uint32_t {
  none = 0,
  kind,
  algorithm,
  dtype,
  op,
  count,
  root,
  workers,
  protocol,
  sequence,
  place ///< where a zero-copy call's buffer lies in its registered window
};

/// The first error a rank hit, written by device or host code, read by the host.
/// Trivially copyable; lives in memory the host can read.
struct error_record {
  std::uint32_t code;   // errc; 0 while no error
  std::int32_t peer;    // the peer involved, -1 if none
  std::uint32_t worker; // which worker (block / host thread team) saw it
  std::uint32_t what;   // wait_kind for timeouts, desc_field for mismatches
  std::uint64_t step;   // pipeline step or expected flag value
  std::uint64_t mine;   // our value (mismatch) or the value we waited for
  std::uint64_t theirs; // the peer's value (mismatch) or the value we last saw
};

inline const char* to_string(errc c) {
  switch (c) {
  case errc::ok:
    return "ok";
  case errc::timeout:
    return "timeout";
  case errc::mismatch:
    return "call mismatch";
  case errc::aborted:
    return "aborted";
  case errc::invalid_argument:
    return "invalid argument";
  case errc::unsupported:
    return "unsupported";
  case errc::platform:
    return "platform error";
  }
  return "unknown";
}

inline const char* to_string(wait_kind w) {
  switch (w) {
  case wait_kind::none:
    return "nothing";
  case wait_kind::data:
    return "data";
  case wait_kind::credit:
    return "a free receive slot (acknowledgement)";
  case wait_kind::barrier:
    return "a barrier";
  case wait_kind::engine:
    return "the DMA engine";
  case wait_kind::flag:
    return "a flag";
  }
  return "unknown";
}

inline const char* to_string(desc_field f) {
  switch (f) {
  case desc_field::none:
    return "none";
  case desc_field::kind:
    return "collective";
  case desc_field::algorithm:
    return "algorithm";
  case desc_field::dtype:
    return "dtype";
  case desc_field::op:
    return "reduction op";
  case desc_field::count:
    return "count";
  case desc_field::root:
    return "root";
  case desc_field::workers:
    return "worker count";
  case desc_field::protocol:
    return "DMA backend";
  case desc_field::sequence:
    return "pipeline step (the ranks are at different calls)";
  case desc_field::place:
    return "place of the buffer in its registered window";
  }
  return "unknown";
}

/// Base of every exception ark throws.
class error : public std::runtime_error {
public:
  error(errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  errc code() const noexcept { return code_; }

private:
  errc code_;
};

class invalid_argument : public error {
public:
  explicit invalid_argument(const std::string& what) : error(errc::invalid_argument, what) {}
};

class timeout_error : public error {
public:
  timeout_error(const std::string& what, error_record rec) : error(errc::timeout, what), record_(rec) {}
  const error_record& record() const noexcept { return record_; }

private:
  error_record record_;
};

class mismatch_error : public error {
public:
  mismatch_error(const std::string& what, error_record rec) : error(errc::mismatch, what), record_(rec) {}
  const error_record& record() const noexcept { return record_; }

private:
  error_record record_;
};

class aborted_error : public error {
public:
  explicit aborted_error(const std::string& what) : error(errc::aborted, what) {}
};

class platform_error : public error {
public:
  explicit platform_error(const std::string& what) : error(errc::platform, what) {}
};

/// A communicator that could not get its memory: the message says what it needs, what the device
/// has free, and the knobs that lower it. Thrown on every rank of the team alike.
class out_of_memory : public platform_error {
public:
  out_of_memory(const std::string& what, std::size_t needed, std::size_t free)
      : platform_error(what), needed_(needed), free_(free) {}
  std::size_t needed() const noexcept { return needed_; }
  std::size_t free() const noexcept { return free_; }

private:
  std::size_t needed_, free_;
};

namespace detail {
[[noreturn]] inline void throw_invalid(const char* call, const std::string& what) {
  throw invalid_argument(std::string(call) + ": " + what);
}
/// A root outside [0, world).
inline void check_root(const char* call, int root, int world) {
  if (root < 0 || root >= world)
    throw_invalid(call, "root " + std::to_string(root) + " is outside [0, " + std::to_string(world) + ")");
}
} // namespace detail

} // namespace ark
