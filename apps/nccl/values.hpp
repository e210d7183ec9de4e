// apps/nccl/values.hpp: NCCL's values as the shim spells them, so that it compiles without NCCL's
// header (apps/nccl/nccl.cu checks each against it), and which reductions ark serves in which of
// its types.
#pragma once

#include "ark/ark.hpp"

#include <optional>

namespace ark::nccl {

enum class result : int {
  success = 0,
  unhandled_cuda_error = 1,
  system_error = 2,
  internal_error = 3,
  invalid_argument = 4,
  invalid_usage = 5,
  remote_error = 6,
  in_progress = 7,
};
enum class data_type : int { i8, u8, i32, u32, i64, u64, f16, f32, f64, bf16, f8e4m3, f8e5m2, count };
enum class scalar_residence : int { device = 0, host_immediate = 1 };
inline constexpr int builtin_op_count = 5; ///< ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg
inline constexpr int max_user_ops = 1 << 16;
inline constexpr int split_nocolor = -1;
/// The NCCL release whose API this is: programs gate features (bf16, avg, PreMulSum, async
/// errors) on ncclGetVersion.
inline constexpr int version_code = 22809;
inline constexpr std::size_t id_bytes = 128;
struct unique_id {
  char internal[id_bytes];
};

inline const char* error_string(result r) {
  switch (r) {
  case result::success:
    return "no error";
  case result::unhandled_cuda_error:
    return "unhandled cuda error (run with ARK_NCCL_DEBUG=INFO for details)";
  case result::system_error:
    return "unhandled system error (run with ARK_NCCL_DEBUG=INFO for details)";
  case result::internal_error:
    return "internal error - please report this issue to the ark developers";
  case result::invalid_argument:
    return "invalid argument (run with ARK_NCCL_DEBUG=WARN for details)";
  case result::invalid_usage:
    return "invalid usage (run with ARK_NCCL_DEBUG=WARN for details)";
  case result::remote_error:
    return "remote process exited or there was a network error";
  case result::in_progress:
    return "NCCL operation in progress";
  }
  return "unknown result code";
}

inline std::size_t size_of(data_type t) {
  constexpr std::size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sizes[static_cast<int>(t)];
}
inline const char* name_of(data_type t) {
  constexpr const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                   "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return names[static_cast<int>(t)];
}
inline bool valid(data_type t) { return static_cast<int>(t) >= 0 && t < data_type::count; }

/// The ark element type a reduction of NCCL type `t` with op `k` runs in, if ark serves it.
/// ark's own types serve every op. The unsigned 32- and 64-bit integers sum and multiply bit for
/// bit as ark's signed type of their width (two's complement wrap-around), but compare, divide
/// and scale differently: those ops, and the 8-bit floats, ark does not serve.
inline std::optional<ark::dtype> reduced_as(data_type t, op::dynamic::kind k) {
  const bool wraps = k == op::dynamic::kind::sum || k == op::dynamic::kind::prod;
  switch (t) {
  case data_type::i8:
    return ark::dtype::i8;
  case data_type::u8:
    return ark::dtype::u8;
  case data_type::i32:
    return ark::dtype::i32;
  case data_type::i64:
    return ark::dtype::i64;
  case data_type::f16:
    return ark::dtype::f16;
  case data_type::f32:
    return ark::dtype::f32;
  case data_type::f64:
    return ark::dtype::f64;
  case data_type::bf16:
    return ark::dtype::bf16;
  case data_type::u32:
    return wraps ? std::optional(ark::dtype::i32) : std::nullopt;
  case data_type::u64:
    return wraps ? std::optional(ark::dtype::i64) : std::nullopt;
  default:
    return std::nullopt;
  }
}

} // namespace ark::nccl
