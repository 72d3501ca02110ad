// What the CUDA runtime says about the local GPUs: how many there are (0 with a reason when there
// is no driver or no device, never an exception) and, for one device, the facts a calibration
// profile records. No kernels here.
#pragma once

#include <cstddef>
#include <string>

namespace foresight::kernels {

struct DeviceCount {
  int count = 0;
  std::string reason;  // why count is 0 ("no CUDA driver", "no CUDA device", ...)
};
DeviceCount device_count();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sms = 0;
  int cc_major = 0, cc_minor = 0;
  std::size_t memory_bytes = 0;
  std::size_t l2_bytes = 0;
  double clock_MHz = 0;         // SM clock the driver reports as maximum
  double memory_clock_MHz = 0;
  int memory_bus_bits = 0;
  int driver_version = 0;       // e.g. 13000 for 13.0
  int runtime_version = 0;
  /// 2 * memory clock * bus width: the DRAM peak implied by the reported clocks (bytes/s).
  double dram_peak_Bps() const { return 2.0 * memory_clock_MHz * 1e6 * memory_bus_bits / 8.0; }
};
/// Throws CudaError when the device cannot be queried.
DeviceInfo device_info(int index);

}  // namespace foresight::kernels
