#include "kernels/device.hpp"

#include <cuda_runtime_api.h>

#include "kernels/cuda_check.hpp"

namespace foresight::kernels {

DeviceCount device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last-error state so later calls start clean
    return {0, std::string("no CUDA device (") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")"};
  }
  if (n == 0) return {0, "no CUDA device"};
  return {n, ""};
}

DeviceInfo device_info(int index) {
  DeviceInfo d;
  d.index = index;
  cudaDeviceProp p{};
  FORESIGHT_CUDA(cudaGetDeviceProperties(&p, index));
  d.name = p.name;
  d.sms = p.multiProcessorCount;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.memory_bytes = p.totalGlobalMem;
  d.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  // Clock fields left cudaDeviceProp in CUDA 13; the attributes remain (kHz).
  int v = 0;
  FORESIGHT_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, index));
  d.clock_MHz = v / 1000.0;
  FORESIGHT_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, index));
  d.memory_clock_MHz = v / 1000.0;
  FORESIGHT_CUDA(cudaDeviceGetAttribute(&d.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, index));
  FORESIGHT_CUDA(cudaDriverGetVersion(&d.driver_version));
  FORESIGHT_CUDA(cudaRuntimeGetVersion(&d.runtime_version));
  return d;
}

}  // namespace foresight::kernels
