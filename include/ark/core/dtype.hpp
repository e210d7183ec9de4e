// ark/core/dtype.hpp: the element types ark reduces, and the type each one accumulates in.
#pragma once

#include "ark/core/float16.hpp"

#include <cstdint>
#include <type_traits>

namespace ark {

enum class dtype : std::uint8_t { f32 = 0, f64, i32, i64, u8, f16, bf16, i8 };

inline constexpr int dtype_count = 8;

template <class T>
struct dtype_traits; // undefined for types ark does not reduce

#define ARK_DTYPE_TRAITS(T, tag, Acc, label)                                                                 \
  template <>                                                                                                \
  struct dtype_traits<T> {                                                                                   \
    static constexpr ark::dtype value = ark::dtype::tag;                                                     \
    using acc = Acc;                                                                                         \
    static constexpr const char* name = label;                                                               \
  };
ARK_DTYPE_TRAITS(float, f32, float, "float")
ARK_DTYPE_TRAITS(double, f64, double, "double")
ARK_DTYPE_TRAITS(std::int32_t, i32, std::int32_t, "int32")
ARK_DTYPE_TRAITS(std::int64_t, i64, std::int64_t, "int64")
ARK_DTYPE_TRAITS(std::uint8_t, u8, std::uint8_t, "uint8")
ARK_DTYPE_TRAITS(fp16, f16, float, "fp16")
ARK_DTYPE_TRAITS(bf16, bf16, float, "bf16")
ARK_DTYPE_TRAITS(std::int8_t, i8, std::int8_t, "int8")
#undef ARK_DTYPE_TRAITS

/// True for the element types listed above.
template <class T>
concept element = requires {
  dtype_traits<T>::value;
};

/// The type a reduction of T is carried out in: float for the 16-bit floats, T otherwise.
template <element T>
using acc_t = typename dtype_traits<T>::acc;

template <element T>
inline constexpr dtype dtype_of = dtype_traits<T>::value;

template <element T>
ARK_HD ARK_FORCEINLINE acc_t<T> to_acc(T v) {
  return static_cast<acc_t<T>>(v);
}

template <element T>
ARK_HD ARK_FORCEINLINE T from_acc(acc_t<T> v) {
  return static_cast<T>(v);
}

inline const char* to_string(dtype t) {
  constexpr const char* names[] = {"float", "double", "int32", "int64", "uint8", "fp16", "bf16", "int8"};
  return names[static_cast<int>(t)];
}

/// Calls f(T{}) with T the element type of t (a run-time type to a template's).
template <class F>
decltype(auto) with_dtype(dtype t, F&& f) {
  switch (t) {
  case dtype::f32:
    return f(float{});
  case dtype::f64:
    return f(double{});
  case dtype::i32:
    return f(std::int32_t{});
  case dtype::i64:
    return f(std::int64_t{});
  case dtype::u8:
    return f(std::uint8_t{});
  case dtype::i8:
    return f(std::int8_t{});
  case dtype::f16:
    return f(fp16{});
  default:
    return f(bf16{});
  }
}

inline std::size_t size_of(dtype t) {
  constexpr std::size_t sizes[] = {4, 8, 4, 8, 1, 2, 2, 1};
  return sizes[static_cast<int>(t)];
}

} // namespace ark
