// ark/platform/mpi_device_memory.hpp: whether the MPI library reads and writes this vendor's GPU
// memory (CUDA-aware, ROCm-aware), as the library says at run time: Open MPI through its
// extensions (MPIX_Query_cuda_support, MPIX_Query_rocm_support), MPICH 4 through
// MPIX_GPU_query_support. A library with neither says no: its buffers must be host memory.
// Include it only where <mpi.h> is available (internode/mpi_engine.hpp does).
#pragma once

#include "ark/config.hpp"

#include <mpi.h>
#if defined(OPEN_MPI) && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace ark::detail {

/// True when the MPI library says it takes the GPU memory of the vendor ark is compiled for
/// (CUDA's unless compiled by hipcc). Call it after MPI_Init.
inline bool mpi_says_device_memory() {
#if defined(ARK_COMPILER_HIP)
#if defined(OMPI_HAVE_MPI_EXT_ROCM) && OMPI_HAVE_MPI_EXT_ROCM
  return MPIX_Query_rocm_support() == 1;
#elif defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40100000
  int yes = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_HIP, &yes) == MPI_SUCCESS && yes;
#else
  return false;
#endif
#else
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000
  int yes = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) == MPI_SUCCESS && yes;
#else
  return false;
#endif
#endif
}

} // namespace ark::detail
