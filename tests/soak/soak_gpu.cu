// tests/soak/soak_gpu.cu: the soak (soak.hpp) on GPUs: ranks as threads sharing the GPUs (several
// ranks per GPU where there are fewer), or one process per rank (--processes). Run by
// `scripts/gpu-session soak`. Ranks that share a GPU in one process share its context, so the
// environment follows the docs/guide.md ("Ranks that share a GPU"): every kernel loaded when the context
// starts, and the most hardware queues; values set by the user are kept.
#include "soak.hpp"

int main(int argc, char** argv) {
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  return ark_soak::soak_main<ark::platform::gpu>(argc, argv, "gpu");
}
