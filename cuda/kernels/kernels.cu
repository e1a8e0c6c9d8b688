// kernels.cu: the one translation unit `make ptx` compiles to
// kernels.sm_72.ptx.gz and kernels.sm_80.ptx.gz (and the emulator compiles as
// host C++). Every kernel is extern "C", so its PTX entry is its name.
#include "quantize.cuh"
#include "ops.cuh"
#include "gptoss.cuh"
#include "delta.cuh"
#include "moe.cuh"
