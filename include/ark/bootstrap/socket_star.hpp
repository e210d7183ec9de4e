// ark/bootstrap/socket_star.hpp: what the socket bootstraps share (unix_socket.hpp, tcp.hpp): a
// star of connected stream sockets, rank 0 holding one per peer and every other rank one to rank
// 0; accepting and reaching rank 0, and all_gather through rank 0. Every wait is bounded by the
// timeout: accepting, connecting, and each send and receive.
#pragma once

#include "ark/core/error.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace ark::detail {

class socket_star {
public:
  using clock = std::chrono::steady_clock;

  /// `who` names the bootstrap in every message.
  socket_star(const char* who, int rank, int world, std::chrono::milliseconds timeout)
      : who_(who), rank_(rank), world_(world), timeout_(timeout) {
    if (world < 1 || world > max_world)
      throw_invalid(who, "world size " + std::to_string(world) + " is outside [1, " +
                             std::to_string(max_world) + "]");
    if (rank < 0 || rank >= world)
      throw_invalid(who, "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  }
  socket_star(const socket_star&) = delete;
  socket_star& operator=(const socket_star&) = delete;
  ~socket_star() {
    for (int fd : peers_)
      if (fd >= 0) ::close(fd);
    if (root_ >= 0) ::close(root_);
    if (listener_ >= 0) ::close(listener_);
    if (!unlink_.empty()) ::unlink(unlink_.c_str());
  }

  int rank() const { return rank_; }
  int world() const { return world_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// The connection to rank 0 (ranks other than 0), -1 on rank 0.
  int root_fd() const { return root_; }
  int listener_fd() const { return listener_; }

  /// Rank 0: takes `listener` (listening; closed with the star, and `unlink_path` removed with it
  /// if given) and accepts every other rank, each naming itself first.
  void accept_ranks(int listener, std::string unlink_path = {}) {
    listener_ = listener;
    unlink_ = std::move(unlink_path);
    const auto deadline = clock::now() + timeout_;
    peers_.assign(world_, -1);
    for (int accepted = 1; accepted < world_; ++accepted) {
      wait_ready(listener, POLLIN, deadline,
                 "ranks connecting (" + std::to_string(accepted) + " of " + std::to_string(world_) + ")");
      const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) fail("accept");
      std::int32_t rank = -1;
      recv_all(c, &rank, sizeof rank, deadline);
      if (rank <= 0 || rank >= world_ || peers_[rank] >= 0) {
        ::close(c);
        fail("a connecting rank sent an invalid rank " + std::to_string(rank));
      }
      peers_[rank] = c;
    }
  }

  /// Other ranks: connect_once() returns a connected socket or -1 (not yet: retried every 10 ms
  /// until the timeout); then this rank names itself. `where`: rank 0's address, for the message.
  template <class Connect>
  void reach_root(Connect&& connect_once, const std::string& where) {
    const auto deadline = clock::now() + timeout_;
    for (;;) {
      const int fd = connect_once(deadline);
      if (fd >= 0) {
        root_ = fd;
        break;
      }
      if (clock::now() > deadline)
        throw timeout_error(std::string(who_) + ": rank " + std::to_string(rank_) +
                                " could not reach rank 0 at " + where + " within " +
                                std::to_string(timeout_.count()) + " ms",
                            {});
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const std::int32_t me = rank_;
    send_all(root_, &me, sizeof me, deadline);
  }

  /// Every rank's n bytes, through rank 0, in rank order (the bootstrap concept's all_gather).
  void all_gather(const void* in, void* out, std::size_t n) {
    const auto deadline = clock::now() + timeout_;
    auto* o = static_cast<std::byte*>(out);
    const std::uint64_t len = n;
    if (rank_ == 0) {
      if (n) std::memcpy(o, in, n);
      for (int r = 1; r < world_; ++r) {
        std::uint64_t theirs = 0;
        recv_all(peers_[r], &theirs, sizeof theirs, deadline);
        if (theirs != len)
          throw_invalid(who_, "rank " + std::to_string(r) + " gathers " + std::to_string(theirs) +
                                  " bytes, rank 0 " + std::to_string(n));
        recv_all(peers_[r], o + r * n, n, deadline);
      }
      for (int r = 1; r < world_; ++r) send_all(peers_[r], o, n * world_, deadline);
    } else {
      send_all(root_, &len, sizeof len, deadline);
      send_all(root_, in, n, deadline);
      recv_all(root_, o, n * world_, deadline);
    }
  }

  /// Waits until fd is ready for `events`, or throws timeout_error at the deadline.
  void wait_ready(int fd, short events, clock::time_point deadline, const std::string& what) const {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      if (left.count() <= 0) throw timeout_error(std::string(who_) + ": timed out waiting for " + what, {});
      pollfd p{fd, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r > 0) return;
      if (r < 0 && errno != EINTR) fail("poll");
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw platform_error(std::string(who_) + ": " + what + ": " + std::strerror(errno));
  }

private:
  void send_all(int fd, const void* p, std::size_t n, clock::time_point deadline) {
    move_all<true>(fd, p, n, deadline);
  }
  void recv_all(int fd, void* p, std::size_t n, clock::time_point deadline) {
    move_all<false>(fd, p, n, deadline);
  }
  /// All n bytes through fd, one way, bounded too: a live peer that stops reading fills the
  /// socket's buffer, one that stops writing leaves ours empty.
  template <bool Send>
  void move_all(int fd, std::conditional_t<Send, const void*, void*> p, std::size_t n,
                clock::time_point deadline) {
    auto* b = static_cast<std::conditional_t<Send, const std::byte*, std::byte*>>(p);
    while (n) {
      wait_ready(fd, Send ? POLLOUT : POLLIN, deadline,
                 Send ? "a peer rank to take our bytes" : "a peer rank's bytes");
      ssize_t k = 0;
      if constexpr (Send)
        k = ::send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      else
        k = ::recv(fd, b, n, MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (!Send && k == 0) throw platform_error(std::string(who_) + ": a peer rank closed its connection");
      if (k <= 0) fail(Send ? "send to a peer rank" : "receive from a peer rank");
      b += k, n -= static_cast<std::size_t>(k);
    }
  }

  const char* who_;
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  int listener_ = -1, root_ = -1;
  std::string unlink_;
  std::vector<int> peers_;
};

} // namespace ark::detail
