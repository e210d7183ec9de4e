// ark/platform/collective_library.hpp: the vendor's collective library, for the engines that hand
// work to it (internode/nccl_engine.hpp): NCCL under CUDA, RCCL (NCCL's API) under HIP. Include
// it only where that library is installed; ark.hpp does not.
#pragma once

#include "ark/config.hpp"

#if defined(ARK_COMPILER_HIP)
#include <rccl/rccl.h>
#else
#include <nccl.h>
#endif
