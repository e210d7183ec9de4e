// ark/bootstrap/tcp.hpp: a bootstrap for processes on any machines that reach each other over
// TCP (a Unix socket does not cross machines). Rank 0 listens on host:port; the others connect,
// retrying until the timeout. Every wait is bounded by the timeout: connecting, accepting, and
// each send and receive. all_gather: through rank 0 (bootstrap/socket_star.hpp).
//
//   ark::tcp_bootstrap boot("node0.example", 29500, rank, world);   // as torchrun's MASTER_ADDR/PORT
//
// split(color, key): the new rank 0 of each group listens on a port the system picks, at the
// address its connection to rank 0 leaves from, and tells the others through this bootstrap.
#pragma once

#include "ark/bootstrap/socket_star.hpp"
#include "ark/concepts/bootstrap.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <memory>
#include <string>

namespace ark {

class tcp_bootstrap {
public:
  /// `host`: rank 0's name or address (rank 0 listens there); `port`: 1 to 65535.
  tcp_bootstrap(const std::string& host, int port, int rank, int world,
                std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : star_(std::make_shared<detail::socket_star>(name, rank, world, timeout)) {
    if (port < 1 || port > 65535)
      detail::throw_invalid(name, "port " + std::to_string(port) + " is outside [1, 65535]");
    const address a = resolve(host, port);
    const std::string where = host + ":" + std::to_string(port);
    if (rank == 0) {
      const int fd = make_socket(a.storage.ss_family, 0);
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a.addr(), a.len) != 0 || ::listen(fd, world) != 0) {
        ::close(fd);
        star_->fail("bind/listen on " + where);
      }
      star_->accept_ranks(fd);
    } else {
      connect_to(a, where);
    }
    tune();
  }

  int rank() const { return star_->rank(); }
  int size() const { return star_->world(); }
  void all_gather(const void* in, void* out, std::size_t n) { star_->all_gather(in, out, n); }
  void barrier() { all_gather(nullptr, nullptr, 0); }

  /// Collective (splittable_bootstrap): each group's new rank 0 listens on a port of the
  /// system's choosing and gathers where to the others.
  tcp_bootstrap split(int color, int key) {
    const detail::split_place at = detail::gather_split(*this, color, key, "tcp_bootstrap::split");
    // the group's meeting point: its new rank 0's address toward this bootstrap, a fresh port
    address where{};
    int listener = -1;
    if (at.leader == rank()) {
      const int fd = rank() == 0 ? star_->listener_fd() : star_->root_fd();
      where.len = sizeof where.storage;
      if (::getsockname(fd, where.addr(), &where.len) != 0) star_->fail("getsockname");
      set_port(where, 0);
      listener = make_socket(where.storage.ss_family, 0);
      if (::bind(listener, where.addr(), where.len) != 0 || ::listen(listener, at.size) != 0 ||
          ::getsockname(listener, where.addr(), &where.len) != 0) {
        ::close(listener);
        star_->fail("listen for a split");
      }
    }
    std::vector<address> all(size());
    all_gather(&where, all.data(), sizeof where);
    return tcp_bootstrap(all[at.leader], listener, at.rank, at.size, star_->timeout());
  }

private:
  static constexpr const char* name = "tcp_bootstrap";
  struct address {
    sockaddr_storage storage{};
    socklen_t len = 0;
    sockaddr* addr() { return reinterpret_cast<sockaddr*>(&storage); }
    const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&storage); }
  };

  /// A split's group: its rank 0 takes `listener`, the others connect to `where`.
  tcp_bootstrap(const address& where, int listener, int rank, int world, std::chrono::milliseconds timeout)
      : star_(std::make_shared<detail::socket_star>(name, rank, world, timeout)) {
    if (rank == 0)
      star_->accept_ranks(listener);
    else
      connect_to(where, "a split's rank 0");
    tune();
  }

  static address resolve(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0 || !res) detail::throw_invalid(name, "cannot resolve '" + host + "': " + ::gai_strerror(rc));
    address a;
    std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
    a.len = static_cast<socklen_t>(res->ai_addrlen);
    ::freeaddrinfo(res);
    return a;
  }
  static void set_port(address& a, int port) {
    if (a.storage.ss_family == AF_INET6)
      reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(static_cast<std::uint16_t>(port));
    else
      reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(static_cast<std::uint16_t>(port));
  }

  /// Reaches rank 0 at `a`: each try a nonblocking connect given up to 100 ms (a host that does
  /// not answer leaves a blocking connect waiting for minutes), retried until the timeout.
  void connect_to(const address& a, const std::string& where) {
    star_->reach_root(
        [&](detail::socket_star::clock::time_point deadline) {
          const int fd = make_socket(a.storage.ss_family, SOCK_NONBLOCK);
          if (::connect(fd, a.addr(), a.len) == 0) return fd;
          if (errno == EINPROGRESS) {
            const auto now = detail::socket_star::clock::now();
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
            pollfd p{fd, POLLOUT, 0};
            int err = 0;
            socklen_t len = sizeof err;
            if (left > 0 && ::poll(&p, 1, static_cast<int>(std::min<long>(left, 100))) > 0 &&
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
              return fd;
          }
          ::close(fd);
          return -1;
        },
        where);
  }
  /// Small messages go at once (the gathers are a few bytes each way).
  void tune() const {
    const int one = 1;
    if (star_->root_fd() >= 0) ::setsockopt(star_->root_fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  int make_socket(int family, int flags) const {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0) star_->fail("socket");
    return fd;
  }

  std::shared_ptr<detail::socket_star> star_;
};

static_assert(splittable_bootstrap<tcp_bootstrap>);

} // namespace ark
