// Physical quantities as types: bytes, seconds, FLOPs and their rates, SI inside.
// GB means 1e9 bytes and GiB 2^30 bytes; both are spelt out wherever a value is converted.
// Raw doubles appear only at the boundaries (parsing, printing, SimGrid), with the unit in the name.
#pragma once

#include <cmath>
#include <compare>

namespace foresight {

/// A double tagged with its dimension, so that bytes never add to seconds.
template <class Tag>
struct Quantity {
  double v = 0.0;

  constexpr Quantity() = default;
  constexpr explicit Quantity(double value) : v(value) {}
  constexpr double value() const { return v; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(v + o.v); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v - o.v); }
  constexpr Quantity operator-() const { return Quantity(-v); }
  constexpr Quantity operator*(double k) const { return Quantity(v * k); }
  constexpr Quantity operator/(double k) const { return Quantity(v / k); }
  constexpr double operator/(Quantity o) const { return v / o.v; }
  constexpr Quantity& operator+=(Quantity o) { v += o.v; return *this; }
  constexpr Quantity& operator-=(Quantity o) { v -= o.v; return *this; }
  constexpr Quantity& operator*=(double k) { v *= k; return *this; }
  constexpr auto operator<=>(const Quantity&) const = default;
  friend constexpr Quantity operator*(double k, Quantity q) { return Quantity(k * q.v); }
};

struct BytesTag {};
struct SecondsTag {};
struct FlopsTag {};
struct BytesPerSecondTag {};
struct FlopsPerSecondTag {};

using Bytes = Quantity<BytesTag>;
using Seconds = Quantity<SecondsTag>;
using Flops = Quantity<FlopsTag>;
using BytesPerSecond = Quantity<BytesPerSecondTag>;
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;

constexpr Seconds operator/(Bytes b, BytesPerSecond r) { return Seconds(b.v / r.v); }
constexpr Seconds operator/(Flops f, FlopsPerSecond r) { return Seconds(f.v / r.v); }
constexpr BytesPerSecond operator/(Bytes b, Seconds t) { return BytesPerSecond(b.v / t.v); }
constexpr FlopsPerSecond operator/(Flops f, Seconds t) { return FlopsPerSecond(f.v / t.v); }
constexpr Bytes operator*(BytesPerSecond r, Seconds t) { return Bytes(r.v * t.v); }
constexpr Flops operator*(FlopsPerSecond r, Seconds t) { return Flops(r.v * t.v); }

template <class T>
constexpr T max(T a, T b) { return a < b ? b : a; }
template <class T>
constexpr T min(T a, T b) { return a < b ? a : b; }

// Constructors named by unit, for code that converts from parsed doubles.
constexpr Bytes bytes(double x) { return Bytes(x); }
constexpr Bytes gigabytes(double x) { return Bytes(x * 1e9); }
constexpr Bytes gibibytes(double x) { return Bytes(x * 1073741824.0); }
constexpr Seconds seconds(double x) { return Seconds(x); }
constexpr Seconds milliseconds(double x) { return Seconds(x * 1e-3); }
constexpr Seconds microseconds(double x) { return Seconds(x * 1e-6); }
constexpr Flops flops(double x) { return Flops(x); }
constexpr BytesPerSecond gigabytes_per_s(double x) { return BytesPerSecond(x * 1e9); }
constexpr BytesPerSecond gigabits_per_s(double x) { return BytesPerSecond(x * 1e9 / 8.0); }
constexpr FlopsPerSecond teraflops_per_s(double x) { return FlopsPerSecond(x * 1e12); }

// Readers named by unit, for printing.
constexpr double in_GB(Bytes b) { return b.v / 1e9; }
constexpr double in_GiB(Bytes b) { return b.v / 1073741824.0; }
constexpr double in_MiB(Bytes b) { return b.v / 1048576.0; }
constexpr double in_s(Seconds t) { return t.v; }
constexpr double in_ms(Seconds t) { return t.v * 1e3; }
constexpr double in_us(Seconds t) { return t.v * 1e6; }
constexpr double in_GBps(BytesPerSecond r) { return r.v / 1e9; }
constexpr double in_TFLOPs(FlopsPerSecond r) { return r.v / 1e12; }

namespace literals {
constexpr Bytes operator""_B(long double x) { return Bytes(double(x)); }
constexpr Bytes operator""_B(unsigned long long x) { return Bytes(double(x)); }
constexpr Bytes operator""_KiB(unsigned long long x) { return Bytes(double(x) * 1024.0); }
constexpr Bytes operator""_MiB(unsigned long long x) { return Bytes(double(x) * 1048576.0); }
constexpr Bytes operator""_GiB(long double x) { return gibibytes(double(x)); }
constexpr Bytes operator""_GiB(unsigned long long x) { return gibibytes(double(x)); }
constexpr Bytes operator""_GB(long double x) { return gigabytes(double(x)); }
constexpr Bytes operator""_GB(unsigned long long x) { return gigabytes(double(x)); }
constexpr Seconds operator""_s(long double x) { return Seconds(double(x)); }
constexpr Seconds operator""_s(unsigned long long x) { return Seconds(double(x)); }
constexpr Seconds operator""_ms(long double x) { return milliseconds(double(x)); }
constexpr Seconds operator""_ms(unsigned long long x) { return milliseconds(double(x)); }
constexpr Seconds operator""_us(long double x) { return microseconds(double(x)); }
constexpr Seconds operator""_us(unsigned long long x) { return microseconds(double(x)); }
constexpr BytesPerSecond operator""_GBps(long double x) { return gigabytes_per_s(double(x)); }
constexpr BytesPerSecond operator""_GBps(unsigned long long x) { return gigabytes_per_s(double(x)); }
constexpr BytesPerSecond operator""_Gbps(long double x) { return gigabits_per_s(double(x)); }
constexpr BytesPerSecond operator""_Gbps(unsigned long long x) { return gigabits_per_s(double(x)); }
constexpr FlopsPerSecond operator""_TFLOPs(long double x) { return teraflops_per_s(double(x)); }
constexpr FlopsPerSecond operator""_TFLOPs(unsigned long long x) { return teraflops_per_s(double(x)); }
}  // namespace literals

}  // namespace foresight
