// bench/demo_gpu.cu: the demo built by nvcc (and by hipcc for the HIP check).
#include "demo.cpp"
