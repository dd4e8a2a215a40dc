// hsSetKernelLaunchOptions (kernels.h): the process-wide launch options of pdl.cuh.
#include "pdl.cuh"

extern "C" int hsSetKernelLaunchOptions(int options) {
  if (options < 0) return hs::kernelLaunchOptions().load();
  return hs::kernelLaunchOptions().exchange(options & HS_LAUNCH_ALL);
}
