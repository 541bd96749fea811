// Device: where a tensor's storage lives. Part of every tensor: Device::cpu(), Device::cuda(i).
#pragma once

#include <ostream>
#include <string>

namespace lockstep {

enum class DeviceType : uint8_t { CPU, CUDA };
constexpr DeviceType kCPU = DeviceType::CPU;  // LibTorch's torch::kCPU, torch::kCUDA
constexpr DeviceType kCUDA = DeviceType::CUDA;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // GPU ordinal; always 0 on the CPU

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  // Parses "cpu", "cuda", "cuda:1" (as torch.device does); throws on anything else.
  static Device parse(const std::string& s);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace lockstep
