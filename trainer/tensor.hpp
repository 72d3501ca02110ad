// Tensors of the trainer: fp32 buffers owned by a backend, and views into them (a parameter is a
// view into the stage's one flat parameter buffer, its gradient a view into the flat gradient
// buffer, so optimizer, checkpoint and bucketed all-reduce work on contiguous ranges). Shapes are
// row-major and at most 2-D here; a micro-batch's activations are (tokens, features).
// Every element is stored as a float; a bf16 tensor (the activations and the working copy of the
// weights under --precision bf16) holds only bf16-representable values, each op rounding what it
// writes into one (precision.hpp). Left out: packed 2-byte storage (the CUDA backend keeps bf16
// copies internally).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace foresight::trainer {

/// Where a buffer lives; collectives over MPI need host memory (CUDA tensors are staged).
enum class Device { host, cuda };

/// What a tensor's elements are: any float, or only values a bf16 can hold (rounded to nearest
/// even by whatever writes them).
enum class ElementType { fp32, bf16 };

/// Bytes one element takes on a device that stores the type natively (what memory reports count).
constexpr std::int64_t bytes_per_element(ElementType t) { return t == ElementType::bf16 ? 2 : 4; }

/// A block of fp32 elements allocated by a backend; freed through the backend's deleter.
struct Buffer {
  float* data = nullptr;
  std::size_t elements = 0;
  Device device = Device::host;
  ElementType type = ElementType::fp32;
  virtual ~Buffer() = default;
};

/// A row-major (rows, cols) view of `rows*cols` contiguous elements of a Buffer.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, std::size_t offset, std::int64_t rows, std::int64_t cols)
      : buffer_(std::move(buffer)), offset_(offset), rows_(rows), cols_(cols) {}

  bool defined() const { return buffer_ != nullptr; }
  float* data() const { return buffer_->data + offset_; }
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
