// apps/nccl/forward.hpp: the real NCCL, for the calls ark does not serve (core.hpp's reduction_plan).
//
// Loaded on the first forwarded call, from ARK_NCCL_LIBRARY, else beside PyTorch (the NCCL its
// wheel depends on), else the CUDA toolkit's or the system's. It is opened with RTLD_DEEPBIND so
// that its calls to its own exported functions (ncclMemFree, ncclCommRegister, ...) stay inside
// it: with ark's library preloaded, the dynamic linker would otherwise send them to ark's. Each
// communicator gets its NCCL twin when a call first needs it: every rank reaches that call (the
// choice depends on the type and op, which the ranks share), rank 0's NCCL id goes to the others
// through the shim's own bootstrap, and NCCL's init runs there. NCCL refuses ranks that share a
// GPU: such a call then fails, naming why. ARK_NCCL_FALLBACK=0 forbids forwarding (tests set it,
// so that no test passes on NCCL's work).
//
// The function types spell NCCL's C types by their ABI (enums as int, handles and streams as
// pointers, the unique id as 128 bytes by value), so that this header needs no NCCL header.
#pragma once

#include "nccl/core.hpp"

#include <dlfcn.h>
#include <link.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ark::nccl {

/// The real NCCL's entry points.
struct real_nccl {
  using id_t = unique_id;
  int (*get_version)(int*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*get_unique_id)(id_t*) = nullptr;
  int (*comm_init_rank)(void**, int, id_t, int) = nullptr;
  int (*comm_destroy)(void*) = nullptr;
  int (*comm_abort)(void*) = nullptr;
  int (*all_reduce)(const void*, void*, std::size_t, int, int, void*, void*) = nullptr;
  int (*reduce_scatter)(const void*, void*, std::size_t, int, int, void*, void*) = nullptr;
  int (*reduce)(const void*, void*, std::size_t, int, int, int, void*, void*) = nullptr;
  int (*dev_comm_create)(void*, const void*, void*) = nullptr;
  int (*dev_comm_destroy)(void*, const void*) = nullptr;
  void* handle = nullptr;
  std::string path;
};

namespace detail {
inline int own_symbol() { return 0; } // its address says which loaded object is this library

/// Directories of loaded objects whose file name contains `name`.
inline std::vector<std::string> loaded_dirs(const char* name) {
  struct ctx {
    const char* name;
    std::vector<std::string> dirs;
  } c{name, {}};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* p) {
        auto* x = static_cast<ctx*>(p);
        const std::string f = info->dlpi_name ? info->dlpi_name : "";
        if (f.find(x->name) != std::string::npos) x->dirs.push_back(f.substr(0, f.rfind('/')));
        return 0;
      },
      &c);
  return c.dirs;
}

/// Where to look for the real library, in order: the one named, else beside PyTorch, else the
/// toolkit's or the system's (NCCL's on CUDA and the host platform, RCCL's on ROCm).
inline std::vector<std::string> candidates(const settings& s) {
  if (!s.library.empty()) return {s.library};
  std::vector<std::string> out;
#if defined(ARK_COMPILER_HIP)
  for (const auto& d : loaded_dirs("libtorch_hip.so")) out.push_back(d + "/librccl.so.1");
  for (const char* p : {"/opt/rocm/lib/librccl.so.1", "/usr/lib/x86_64-linux-gnu/librccl.so.1"})
    out.push_back(p);
#else
  for (const auto& d : loaded_dirs("libtorch_cuda.so"))
    out.push_back(d + "/../../nvidia/nccl/lib/libnccl.so.2");
  for (const char* p : {"/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2",
                        "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib64/libnccl.so.2"})
    out.push_back(p);
#endif
  return out;
}
} // namespace detail

/// Opens the real NCCL (not this library, whose soname it shares); `why` says what failed.
inline bool open_real(real_nccl& n, const settings& s, std::string& why) {
  Dl_info self{};
  ::dladdr(reinterpret_cast<void*>(&detail::own_symbol), &self);
  for (const auto& path : detail::candidates(s)) {
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      why += "\n  " + path + ": " + ::dlerror();
      continue;
    }
    void* v = ::dlsym(h, "ncclGetVersion");
    Dl_info where{};
    if (v && ::dladdr(v, &where) && where.dli_fbase == self.dli_fbase) {
      why += "\n  " + path + ": ark's own library, not NCCL";
      ::dlclose(h);
      continue;
    }
    auto sym = [h](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
    };
    sym(n.get_version, "ncclGetVersion");
    sym(n.error_string, "ncclGetErrorString");
    sym(n.get_unique_id, "ncclGetUniqueId");
    sym(n.comm_init_rank, "ncclCommInitRank");
    sym(n.comm_destroy, "ncclCommDestroy");
    sym(n.comm_abort, "ncclCommAbort");
    sym(n.all_reduce, "ncclAllReduce");
    sym(n.reduce_scatter, "ncclReduceScatter");
    sym(n.reduce, "ncclReduce");
    sym(n.dev_comm_create, "ncclDevCommCreate");
    sym(n.dev_comm_destroy, "ncclDevCommDestroy");
    if (!n.get_unique_id || !n.comm_init_rank || !n.comm_destroy || !n.all_reduce || !n.error_string) {
      why += "\n  " + path + ": lacks NCCL's functions";
      ::dlclose(h);
      continue;
    }
    n.handle = h;
    n.path = path;
    return true;
  }
  return false;
}

/// Forwards calls to the real NCCL, with a twin communicator per ark one.
template <device P>
class forward {
public:
  /// The process's, configured by the environment (settings).
  static forward& get() {
    static forward f(settings::get());
    return f;
  }
  explicit forward(settings s) : s_(std::move(s)) {}
  forward(const forward&) = delete;
  forward& operator=(const forward&) = delete;
  // Twins end with release(); the library stays loaded (NCCL's threads may outlive a communicator).

  /// Runs f(real NCCL, the twin of c) and returns its code as ours; or fails, naming why.
  template <class F>
  result run(const char* call, comm<P>* c, F&& f) {
    void* twin = nullptr;
    const result r = guard(call, [&] {
      if (!c) fail(result::invalid_argument, call, "comm is NULL");
      if (!s_.fallback)
        fail(result::invalid_usage, call,
             "ark does not serve this call and forwarding it to NCCL is forbidden (ARK_NCCL_FALLBACK=0)");
      // a group's calls run at its end, in ark; NCCL's would run now, out of order, and one thread
      // driving several ranks would wait on itself
      if (group<P>::mine().depth > 0)
        fail(result::invalid_usage, call,
             "ark does not serve this call, and forwarding it to NCCL inside ncclGroupStart/End is not "
             "supported: call it outside the group");
      twin = twin_of(c, call);
    });
    if (r != result::success) return r;
    log(2, [&] { return std::string(call) + ": forwarded to NCCL (" + real_.path + ")"; });
    const int code = f(real_, twin);
    if (code != 0)
      last_error_text() = std::string(call) + " (forwarded to NCCL): " + real_.error_string(code);
    return static_cast<result>(code);
  }

  /// Ends c's twin, if it has one.
  void release(comm<P>* c, bool abort) {
    void* twin = nullptr;
    {
      std::lock_guard<std::mutex> lock(m_);
      auto it = twins_.find(c);
      if (it == twins_.end()) return;
      twin = it->second;
      twins_.erase(it);
    }
    (abort && real_.comm_abort ? real_.comm_abort : real_.comm_destroy)(twin);
  }

private:
  /// c's twin, made on first need. The lock guards the library and the map only: making a twin
  /// is collective (every rank of c, maybe threads of this process, meets in the side bootstrap).
  void* twin_of(comm<P>* c, const char* call) {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (auto it = twins_.find(c); it != twins_.end()) return it->second;
      if (!real_.handle) {
        std::string why;
        if (!open_real(real_, s_, why))
          fail(result::invalid_usage, call,
               "ark does not serve this call, and no NCCL library to forward it to was found (set "
               "ARK_NCCL_LIBRARY):" +
                   why);
      }
    }
    c->ark(call);
    // rank 0's id to every rank, through the shim's own bootstrap: every rank is here
    unique_id mine{};
    int made = 0;
    if (c->rank() == 0) made = real_.get_unique_id(&mine);
    std::vector<unique_id> all(c->world());
    c->side().all_gather(&mine, all.data(), sizeof mine);
    if (made != 0)
      fail(result::internal_error, call, std::string("NCCL's ncclGetUniqueId: ") + real_.error_string(made));
    void* twin = nullptr;
    const int code = real_.comm_init_rank(&twin, c->world(), all[0], c->rank());
    if (code != 0)
      fail(static_cast<result>(code), call,
           std::string("forwarding to NCCL: its ncclCommInitRank failed: ") + real_.error_string(code) +
               " (NCCL refuses ranks that share a GPU)");
    std::lock_guard<std::mutex> lock(m_);
    twins_.emplace(c, twin);
    return twin;
  }

  settings s_;
  std::mutex m_;
  real_nccl real_;
  std::map<comm<P>*, void*> twins_;
};

/// A reduction, its type and op resolved once: ark's (core.hpp's `*_work`, on stream s) where it
/// serves them, else the real NCCL's (`real_call(real NCCL, twin communicator)`, returning NCCL's
/// code) where forwarding is allowed and a library is found, else an error naming the call and
/// why. A NULL comm or a type or op that is not NCCL's (or not c's) is the call's error: nothing
/// is forwarded.
template <device P, class Work, class Real>
result serve_or_forward(forward<P>& to, const char* call, comm<P>* c, data_type t, int op,
                        typename P::stream s, Work&& work, Real&& real_call) {
  reduction_plan p;
  const result r = guard(call, [&] { p = plan_reduction(c, t, op, call); });
  if (r != result::success) return r;
  if (p.as) return reduction(call, c, p, s, std::forward<Work>(work));
  return to.run(call, c, std::forward<Real>(real_call));
}

} // namespace ark::nccl
