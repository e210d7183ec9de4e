// apps/nccl/errors.hpp: how the shim fails (NCCL's codes, and a text for ncclGetLastError) and its
// settings from the environment, read once.
#pragma once

#include "nccl/values.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace ark::nccl {

/// A failure the shim reports with an NCCL code (ark's own exceptions are mapped in guard()).
class failure : public std::runtime_error {
public:
  failure(result code, const std::string& what) : std::runtime_error(what), code_(code) {}
  result code() const { return code_; }

private:
  result code_;
};
[[noreturn]] inline void fail(result code, const std::string& call, const std::string& why) {
  throw failure(code, call + ": " + why);
}

/// Settings from the environment, NCCL's style with ARK_ names (docs/guide.md, "The NCCL API").
struct settings {
  bool fallback = true;          ///< ARK_NCCL_FALLBACK=0: never forward a call to NCCL
  std::string library;           ///< ARK_NCCL_LIBRARY: the real libnccl.so.2 to forward to
  int debug = 0;                 ///< ARK_NCCL_DEBUG: WARN (1) logs errors, INFO (2) each call's path too
  int max_ctas = -1;             ///< ARK_MAX_CTAS: the SM budget of each call (thread blocks)
  long timeout_ms = 0;           ///< ARK_TIMEOUT_MS: a wait on a peer fails after this long (0: ark's)
  long init_timeout_ms = 300000; ///< ARK_INIT_TIMEOUT_MS: how long ranks wait for each other at init
  std::string algo;              ///< ARK_ALGO: one_shot, two_shot, ring or direct (all-reduce and kin)
  std::string proto;             ///< ARK_PROTO: ll or simple
  bool early_launch = true;      ///< ARK_EARLY_LAUNCH=0: no early launch (config::early_launch)

  static settings from_env() {
    settings s;
    auto get = [](const char* n) -> const char* {
      const char* v = std::getenv(n);
      return v && *v ? v : nullptr;
    };
    if (const char* v = get("ARK_NCCL_FALLBACK")) s.fallback = std::string(v) != "0";
    if (const char* v = get("ARK_NCCL_LIBRARY")) s.library = v;
    if (const char* v = get("ARK_NCCL_DEBUG")) {
      const std::string d = v;
      s.debug = d == "INFO" || d == "TRACE" ? 2 : d == "WARN" ? 1 : 0;
    }
    if (const char* v = get("ARK_MAX_CTAS")) s.max_ctas = std::atoi(v);
    if (const char* v = get("ARK_TIMEOUT_MS")) s.timeout_ms = std::atol(v);
    if (const char* v = get("ARK_INIT_TIMEOUT_MS")) s.init_timeout_ms = std::atol(v);
    if (const char* v = get("ARK_ALGO")) s.algo = v;
    if (const char* v = get("ARK_PROTO")) s.proto = v;
    if (const char* v = get("ARK_EARLY_LAUNCH")) s.early_launch = std::string(v) != "0";
    return s;
  }
  static const settings& get() {
    static const settings s = from_env();
    return s;
  }
};

/// Writes the line made by `line()` at ARK_NCCL_DEBUG `level` or above (made only then: calls
/// log on every operation, whose cost the shim keeps near nothing).
template <class F>
void log(int level, F&& line) {
  if (settings::get().debug >= level)
    std::fprintf(stderr, "ark-nccl %d: %s\n", static_cast<int>(::getpid()), std::string(line()).c_str());
}

/// This thread's last error text (ncclGetLastError).
inline std::string& last_error_text() {
  thread_local std::string text;
  return text;
}

/// Runs f, mapping what it throws to NCCL's codes and keeping the text for ncclGetLastError.
template <class F>
result guard(const char* call, F&& f) {
  auto failed = [&](result r, const std::string& what) {
    last_error_text() = what;
    log(1, [&] { return std::string(call) + " failed: " + what; });
    return r;
  };
  try {
    f();
    return result::success;
  } catch (const failure& e) {
    return failed(e.code(), e.what());
  } catch (const ark::invalid_argument& e) {
    return failed(result::invalid_argument, e.what());
  } catch (const ark::mismatch_error& e) {
    return failed(result::invalid_usage, e.what());
  } catch (const ark::timeout_error& e) {
    return failed(result::remote_error, e.what());
  } catch (const ark::aborted_error& e) {
    return failed(result::remote_error, e.what());
  } catch (const ark::platform_error& e) {
    return failed(result::unhandled_cuda_error, e.what());
  } catch (const ark::error& e) {
    return failed(e.code() == errc::unsupported ? result::invalid_usage : result::internal_error, e.what());
  } catch (const std::bad_alloc&) {
    return failed(result::system_error, std::string(call) + ": out of host memory");
  } catch (const std::exception& e) {
    return failed(result::internal_error, std::string(call) + ": " + e.what());
  }
}

/// The NCCL code of an error ark recorded on a rank (ncclCommGetAsyncError).
inline result async_result(const error_record& e) {
  switch (static_cast<errc>(e.code)) {
  case errc::ok:
    return result::success;
  case errc::timeout:
  case errc::aborted:
    return result::remote_error;
  case errc::mismatch:
  case errc::unsupported:
  case errc::invalid_argument:
    return result::invalid_usage;
  case errc::platform:
    return result::unhandled_cuda_error;
  }
  return result::internal_error;
}

/// Refuses a value that is not one of NCCL's data types.
inline void check_type(data_type t, const char* call) {
  if (!valid(t))
    fail(result::invalid_argument, call,
         "datatype " + std::to_string(static_cast<int>(t)) + " is not an NCCL type");
}

} // namespace ark::nccl
