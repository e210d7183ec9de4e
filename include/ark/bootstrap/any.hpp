// ark/bootstrap/any.hpp: any bootstrap behind one type, so that what holds one (a communicator)
// is not a template of its bootstrap.
#pragma once

#include "ark/concepts/bootstrap.hpp"
#include "ark/core/error.hpp"

#include <cstddef>
#include <memory>
#include <utility>

namespace ark {

class any_bootstrap {
public:
  template <bootstrap Boot>
  explicit any_bootstrap(Boot boot) : b_(std::make_unique<holder<Boot>>(std::move(boot))) {}

  int rank() { return b_->rank(); }
  int size() { return b_->size(); }
  void all_gather(const void* in, void* out, std::size_t n) { b_->all_gather(in, out, n); }
  void barrier() { b_->barrier(); }
  /// The held bootstrap's split (splittable_bootstrap); invalid_argument where it has none.
  any_bootstrap split(int color, int key) { return b_->split(color, key); }

private:
  struct base {
    virtual ~base() = default;
    virtual int rank() = 0;
    virtual int size() = 0;
    virtual void all_gather(const void*, void*, std::size_t) = 0;
    virtual void barrier() = 0;
    virtual any_bootstrap split(int, int) = 0;
  };
  template <class Boot>
  struct holder final : base {
    explicit holder(Boot&& b) : boot(std::move(b)) {}
    int rank() override { return boot.rank(); }
    int size() override { return boot.size(); }
    void all_gather(const void* in, void* out, std::size_t n) override { boot.all_gather(in, out, n); }
    void barrier() override { boot.barrier(); }
    any_bootstrap split(int color, int key) override {
      if constexpr (splittable_bootstrap<Boot>)
        return any_bootstrap(boot.split(color, key));
      else
        detail::throw_invalid("any_bootstrap::split", "this bootstrap cannot be split");
    }
    Boot boot;
  };
  std::unique_ptr<base> b_;
};

static_assert(splittable_bootstrap<any_bootstrap>);

} // namespace ark
