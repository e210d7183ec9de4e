// ark/bootstrap/unix_socket.hpp: a bootstrap for one process per rank on one node, over a Unix
// domain socket. Rank 0 listens on `path`; the others connect (retrying until the timeout). Every
// wait is bounded by the timeout: connecting, accepting, and each send and receive.
// all_gather: every rank sends its bytes to rank 0, which returns the concatenation to all
// (bootstrap/socket_star.hpp).
//
//   ark::unix_socket_bootstrap boot("/tmp/ark-job-42.sock", rank, world);
//   ark::communicator<ark::platform::cuda> comm(std::move(boot), cfg);
//
// split(color, key) meets at a socket per new group: its path is this one's with a suffix, so
// the path needs room for one (a sun_path holds 107 characters).
#pragma once

#include "ark/bootstrap/socket_star.hpp"
#include "ark/concepts/bootstrap.hpp"

#include <sys/un.h>

#include <memory>
#include <string>

namespace ark {

class unix_socket_bootstrap {
public:
  unix_socket_bootstrap(std::string path, int rank, int world,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : star_(std::make_shared<detail::socket_star>(name, rank, world, timeout)), path_(path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path)) detail::throw_invalid(name, "socket path too long");
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (rank == 0) {
      const int fd = make_socket(0);
      ::unlink(path.c_str());
      if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, world) != 0) {
        ::close(fd);
        star_->fail("bind/listen on " + path);
      }
      star_->accept_ranks(fd, path);
    } else {
      star_->reach_root(
          [&](auto) {
            // nonblocking: a listener whose backlog is full (a stale one that never accepts)
            // refuses with EAGAIN where a blocking connect would wait for it without a bound
            const int fd = make_socket(SOCK_NONBLOCK);
            if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
            ::close(fd);
            return -1;
          },
          path);
    }
  }

  int rank() const { return star_->rank(); }
  int size() const { return star_->world(); }
  void all_gather(const void* in, void* out, std::size_t n) { star_->all_gather(in, out, n); }
  void barrier() { all_gather(nullptr, nullptr, 0); }

  /// Collective (splittable_bootstrap): each new group meets at a socket of its own, named after
  /// this one's, the split's serial (the same on every rank: splits are collective) and the color.
  unix_socket_bootstrap split(int color, int key) {
    const detail::split_place at = detail::gather_split(*this, color, key, "unix_socket_bootstrap::split");
    return unix_socket_bootstrap(path_ + "." + std::to_string((*splits_)++) + "." + std::to_string(color),
                                 at.rank, at.size, star_->timeout());
  }

private:
  static constexpr const char* name = "unix_socket_bootstrap";
  int make_socket(int flags) const {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0) star_->fail("socket");
    return fd;
  }

  std::shared_ptr<detail::socket_star> star_;
  std::string path_; ///< rank 0's socket (split names after it)
  std::shared_ptr<std::uint64_t> splits_ =
      std::make_shared<std::uint64_t>(0); ///< splits made, shared by copies
};

static_assert(splittable_bootstrap<unix_socket_bootstrap>);

} // namespace ark
