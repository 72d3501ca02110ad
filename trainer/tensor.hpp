// Tensors of the trainer: fp32 buffers owned by a backend, and views into them (a parameter is a
// view into the stage's one flat parameter buffer, its gradient a view into the flat gradient
// buffer, so optimizer, checkpoint and bucketed all-reduce work on contiguous ranges). Shapes are
// row-major and at most 2-D here; a micro-batch's activations are (tokens, features).
// A bf16 tensor (the activations and the working copy of the weights under --precision bf16) holds
// only bf16-representable values, each op rounding what it writes into one (precision.hpp). How
// they sit in memory is the buffer's Storage: the CPU backend keeps one float per element, the
// CUDA backend packs 2-byte bf16 (what halves their memory and bandwidth); data() hands out floats
// and refuses packed storage, raw() is the address of the first element whatever the storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/error.hpp"

namespace foresight::trainer {

/// Where a buffer lives; collectives over MPI need host memory (CUDA tensors are staged).
enum class Device { host, cuda };

/// What a tensor's elements are: any float, or only values a bf16 can hold (rounded to nearest
/// even by whatever writes them).
enum class ElementType { fp32, bf16 };

/// Bytes one element takes on a device that stores the type natively (what memory reports count).
constexpr std::int64_t bytes_per_element(ElementType t) { return t == ElementType::bf16 ? 2 : 4; }

/// How a buffer lays its elements out in memory: one float each (every fp32 tensor, and the CPU
/// backend's bf16 tensors, whose floats hold bf16 values), or packed bf16, 2 bytes each (the CUDA
/// backend's bf16 tensors; the bit layout of kernels::bf16 and CUDA's __nv_bfloat16).
enum class Storage { float32, packed_bf16 };

/// Bytes one element takes in memory under storage `s`.
constexpr std::size_t storage_bytes(Storage s) { return s == Storage::packed_bf16 ? 2 : 4; }

/// A block of elements allocated by a backend; freed through the backend's deleter.
struct Buffer {
  void* raw = nullptr;  // the first element: floats under Storage::float32, else 2-byte bf16
  std::size_t elements = 0;
  Device device = Device::host;
  ElementType type = ElementType::fp32;
  Storage storage = Storage::float32;
  virtual ~Buffer() = default;
};

/// A row-major (rows, cols) view of `rows*cols` contiguous elements of a Buffer.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, std::size_t offset, std::int64_t rows, std::int64_t cols)
      : buffer_(std::move(buffer)), offset_(offset), rows_(rows), cols_(cols) {}

  bool defined() const { return buffer_ != nullptr; }
  /// The elements as floats. Fails (FORESIGHT_CHECK) on packed bf16 storage, which holds no
  /// floats: code that reads one must go through raw() (device kernels) or the backend's
  /// copy_to_host (which converts), never reinterpret 2-byte elements as 4-byte ones.
  float* data() const {
    FORESIGHT_CHECK(buffer_->storage == Storage::float32)
        << "Tensor::data() of a packed bf16 tensor (" << rows_ << "x" << cols_
        << "): read it with raw() or the backend's copy_to_host";
    return static_cast<float*>(buffer_->raw) + offset_;
  }
  /// The address of the first element whatever the storage (the offset counted in elements of
  /// element_bytes() each): what device kernels, cuBLAS and NCCL take.
  void* raw() const { return static_cast<std::byte*>(buffer_->raw) + offset_ * element_bytes(); }
  Storage storage() const { return buffer_->storage; }
  /// Bytes one element takes in memory (4, or 2 for packed bf16), and the view's bytes.
  std::size_t element_bytes() const { return storage_bytes(buffer_->storage); }
  std::size_t bytes() const { return std::size_t(numel()) * element_bytes(); }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::int64_t numel() const { return rows_ * cols_; }
  Device device() const { return buffer_->device; }
  ElementType element_type() const { return buffer_->type; }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  std::size_t offset() const { return offset_; }

  /// Rows [first, first+count) as a view.
  Tensor row_slice(std::int64_t first, std::int64_t count) const {
    return Tensor(buffer_, offset_ + std::size_t(first * cols_), count, cols_);
  }
  /// The same elements seen as (rows, cols); rows*cols must equal numel().
  Tensor reshaped(std::int64_t rows, std::int64_t cols) const { return Tensor(buffer_, offset_, rows, cols); }

 private:
  std::shared_ptr<Buffer> buffer_;
  std::size_t offset_ = 0;
  std::int64_t rows_ = 0, cols_ = 0;
};

}  // namespace foresight::trainer
