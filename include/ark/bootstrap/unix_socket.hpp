// ark/bootstrap/unix_socket.hpp: a bootstrap for one process per rank on one node, over a Unix
// domain socket. Rank 0 listens on `path`; the others connect (retrying until the timeout). Every
// wait is bounded by the timeout: connecting, accepting, and each send and receive.
// all_gather: every rank sends its bytes to rank 0, which returns the concatenation to all.
//
//   ark::unix_socket_bootstrap boot("/tmp/ark-job-42.sock", rank, world);
//   ark::communicator<ark::platform::cuda> comm(std::move(boot), cfg);
//
// split(color, key) meets at a socket per new group: its path is this one's with a suffix, so
// the path needs room for one (a sun_path holds 107 characters).
#pragma once

#include "ark/concepts/bootstrap.hpp"
#include "ark/core/error.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace ark {

class unix_socket_bootstrap {
public:
  unix_socket_bootstrap(std::string path, int rank, int world,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : state_(std::make_shared<state>()) {
    if (world < 1 || world > max_world)
      detail::throw_invalid("unix_socket_bootstrap", "world size " + std::to_string(world) +
                                                         " is outside [1, " + std::to_string(max_world) +
                                                         "]");
    if (rank < 0 || rank >= world)
      detail::throw_invalid("unix_socket_bootstrap", "rank " + std::to_string(rank) + " is outside [0, " +
                                                         std::to_string(world) + ")");
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path))
      detail::throw_invalid("unix_socket_bootstrap", "socket path too long");
    state_->rank = rank;
    state_->world = world;
    state_->timeout = timeout;
    state_->name = path;
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (rank == 0) {
      const int fd = make_socket();
      ::unlink(path.c_str());
      if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, world) != 0) {
        ::close(fd);
        fail("bind/listen on " + path);
      }
      state_->listener = fd;
      state_->path = path;
      state_->peers.assign(world, -1);
      for (int accepted = 1; accepted < world; ++accepted) {
        wait_ready(fd, POLLIN, deadline,
                   "ranks connecting (" + std::to_string(accepted) + " of " + std::to_string(world) + ")");
        const int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) fail("accept");
        std::int32_t who = -1;
        state_->recv_all(c, &who, sizeof who, deadline);
        if (who <= 0 || who >= world || state_->peers[who] >= 0) {
          ::close(c);
          fail("a connecting rank sent an invalid rank " + std::to_string(who));
        }
        state_->peers[who] = c;
      }
    } else {
      for (;;) {
        // nonblocking: a listener whose backlog is full (a stale one that never accepts) refuses
        // with EAGAIN where a blocking connect would wait for it without a bound
        const int fd = make_socket(SOCK_NONBLOCK);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
          state_->root = fd;
          break;
        }
        ::close(fd);
        if (std::chrono::steady_clock::now() > deadline)
          throw timeout_error("unix_socket_bootstrap: rank " + std::to_string(rank) +
                                  " could not reach rank 0 at " + path + " within " +
                                  std::to_string(timeout.count()) + " ms",
                              {});
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      const std::int32_t me = rank;
      state_->send_all(state_->root, &me, sizeof me, deadline);
    }
  }

  int rank() const { return state_->rank; }
  int size() const { return state_->world; }

  void all_gather(const void* in, void* out, std::size_t n) {
    state& s = *state_;
    const auto deadline = std::chrono::steady_clock::now() + s.timeout;
    auto* o = static_cast<std::byte*>(out);
    const std::uint64_t len = n;
    if (s.rank == 0) {
      if (n) std::memcpy(o, in, n);
      for (int r = 1; r < s.world; ++r) {
        std::uint64_t theirs = 0;
        s.recv_all(s.peers[r], &theirs, sizeof theirs, deadline);
        if (theirs != len)
          detail::throw_invalid("unix_socket_bootstrap", "rank " + std::to_string(r) + " gathers " +
                                                             std::to_string(theirs) + " bytes, rank 0 " +
                                                             std::to_string(n));
        s.recv_all(s.peers[r], o + r * n, n, deadline);
      }
      for (int r = 1; r < s.world; ++r) s.send_all(s.peers[r], o, n * s.world, deadline);
    } else {
      s.send_all(s.root, &len, sizeof len, deadline);
      s.send_all(s.root, in, n, deadline);
      s.recv_all(s.root, o, n * s.world, deadline);
    }
  }

  void barrier() { all_gather(nullptr, nullptr, 0); }

  /// Collective (splittable_bootstrap): each new group meets at a socket of its own, named after
  /// this one's, the split's serial (the same on every rank: splits are collective) and the color.
  unix_socket_bootstrap split(int color, int key) {
    if (color < 0) detail::throw_invalid("unix_socket_bootstrap::split", "color must be >= 0");
    state& s = *state_;
    std::vector<detail::split_card> cards(s.world);
    const detail::split_card mine{color, key};
    all_gather(&mine, cards.data(), sizeof mine);
    const detail::split_place at = detail::place_in_split(cards.data(), s.world, s.rank);
    return unix_socket_bootstrap(s.name + "." + std::to_string(s.splits++) + "." + std::to_string(color),
                                 at.rank, at.size, s.timeout);
  }

private:
  struct state {
    int rank = 0, world = 1;
    std::chrono::milliseconds timeout{};
    std::string name; ///< the socket's path, on every rank (split names its groups' after it)
    std::uint64_t splits = 0;
    int listener = -1, root = -1;
    std::string path;
    std::vector<int> peers;
    ~state() {
      for (int fd : peers)
        if (fd >= 0) ::close(fd);
      if (root >= 0) ::close(root);
      if (listener >= 0) {
        ::close(listener);
        ::unlink(path.c_str());
      }
    }
    void send_all(int fd, const void* p, std::size_t n, std::chrono::steady_clock::time_point deadline) {
      move_all<true>(fd, p, n, deadline);
    }
    void recv_all(int fd, void* p, std::size_t n, std::chrono::steady_clock::time_point deadline) {
      move_all<false>(fd, p, n, deadline);
    }
    /// All n bytes through fd, one way, bounded too: a live peer that stops reading fills the
    /// socket's buffer, one that stops writing leaves ours empty.
    template <bool Send>
    static void move_all(int fd, std::conditional_t<Send, const void*, void*> p, std::size_t n,
                         std::chrono::steady_clock::time_point deadline) {
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
        if (!Send && k == 0) throw platform_error("unix_socket_bootstrap: a peer rank closed its connection");
        if (k <= 0) fail(Send ? "send to a peer rank" : "receive from a peer rank");
        b += k, n -= static_cast<std::size_t>(k);
      }
    }
  };

  static int make_socket(int flags = 0) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0) fail("socket");
    return fd;
  }
  static void wait_ready(int fd, short events, std::chrono::steady_clock::time_point deadline,
                         const std::string& what) {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw timeout_error("unix_socket_bootstrap: timed out waiting for " + what, {});
      pollfd p{fd, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r > 0) return;
      if (r < 0 && errno != EINTR) fail("poll");
    }
  }
  [[noreturn]] static void fail(const std::string& what) {
    throw platform_error("unix_socket_bootstrap: " + what + ": " + std::strerror(errno));
  }

  std::shared_ptr<state> state_;
};

static_assert(splittable_bootstrap<unix_socket_bootstrap>);

} // namespace ark
