// Standalone test of hsFillWeight (native/kernels/dummy_init.cu) against the TypeScript rule of
// src/backends/weight_fill.ts: values pinned from the TS implementation (the same numbers are
// pinned in test/unit/backends/weight_fill.test.ts), plus a C++ port of the rule over odd starts,
// unaligned destinations, partial runs, f32 elements, counters above 2^32 and constants. Runs on
// the GPU or, with `bash native/tests/emu/run_emu.sh dummy`, on the CPU through the emulator.
// Usage: dummy_init_test [--quick]
#include <cstdio>
#include <cstring>
#include <vector>

#include "../kernels/weight_fill.h"
#include "test_common.h"

namespace {

uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

/** Element i of the rule with table[k] = tableOf(k). */
template <typename E, typename F>
E reference(unsigned long long i, uint32_t k0, uint32_t k1, F tableOf) {
  const unsigned long long c = i >> 1;
  const uint32_t r = mix32(mix32(static_cast<uint32_t>(c) ^ k0) ^ (k1 + static_cast<uint32_t>(c >> 32) * 0x9e3779b9u));
  return tableOf((i & 1) ? (r >> 16) : (r & 0xffffu));
}

int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

/** Runs the fill into a poisoned device buffer at element `pad` and returns the host copy (pad included). */
template <typename E>
std::vector<E> run(size_t count, unsigned long long first, const std::vector<E>* table, uint32_t constant, uint32_t k0,
                   uint32_t k1, size_t pad) {
  const int dtype = sizeof(E) == 2 ? 1 : 0;  // HS_DTYPE_BF16 / HS_DTYPE_F32
  E* dst = nullptr;
  E* tab = nullptr;
  const size_t n = count + pad + 3;
  HS_CHECK(cudaMalloc(&dst, n * sizeof(E)));
  HS_CHECK(cudaMemset(dst, 0xab, n * sizeof(E)));
  if (table != nullptr) {
    HS_CHECK(cudaMalloc(&tab, 65536 * sizeof(E)));
    HS_CHECK(cudaMemcpy(tab, table->data(), 65536 * sizeof(E), cudaMemcpyHostToDevice));
  }
  HS_CHECK(hsFillWeight(dst + pad, dtype, count, first, tab, constant, k0, k1, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  std::vector<E> out(n);
  HS_CHECK(cudaMemcpy(out.data(), dst, n * sizeof(E), cudaMemcpyDeviceToHost));
  HS_CHECK(cudaFree(dst));
  if (tab != nullptr) HS_CHECK(cudaFree(tab));
  return out;
}

/** Compares a run with the reference (and that the poison around it is untouched). */
template <typename E, typename F>
bool matches(const std::vector<E>& out, size_t count, unsigned long long first, uint32_t k0, uint32_t k1, size_t pad,
             F tableOf) {
  E poison;
  std::memset(&poison, 0xab, sizeof(E));
  for (size_t j = 0; j < out.size(); ++j) {
    const bool inside = j >= pad && j < pad + count;
    const E want = inside ? reference<E>(first + (j - pad), k0, k1, tableOf) : poison;
    if (out[j] != want) {
      std::printf("  element %zu: got %u, want %u\n", j, static_cast<unsigned>(out[j]), static_cast<unsigned>(want));
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::vector<uint16_t> ident(65536);
  for (int k = 0; k < 65536; ++k) ident[k] = static_cast<uint16_t>(k);
  const uint32_t k0 = 0xdeadbeefu, k1 = 0x12345678u;

  // Pinned from the TS rule: generateFill(identity table, start 3, count 10) and start 2^33 + 1.
  const uint16_t pinA[10] = {50185, 4776, 46426, 63329, 4271, 50427, 1265, 50411, 64571, 63138};
  const uint16_t pinB[4] = {61799, 59215, 18496, 32625};
  std::vector<uint16_t> a = run<uint16_t>(10, 3, &ident, 0, k0, k1, 0);
  std::vector<uint16_t> b = run<uint16_t>(4, (1ull << 33) + 1, &ident, 0, k0, k1, 0);
  expect(std::memcmp(a.data(), pinA, sizeof(pinA)) == 0, "values pinned from weight_fill.ts (start 3)");
  expect(std::memcmp(b.data(), pinB, sizeof(pinB)) == 0, "values pinned from weight_fill.ts (counter above 2^32)");

  auto id16 = [](uint32_t k) { return static_cast<uint16_t>(k); };
  const size_t big = quick ? 3000 : 70000;  // more than one grid-stride step needs > 2^27 elements; this covers many blocks
  for (size_t pad : {size_t{0}, size_t{1}, size_t{8}}) {
    for (unsigned long long first : {0ull, 1ull, 7ull, (1ull << 32) * 2 - 5}) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{9}, big}) {
        std::vector<uint16_t> out = run<uint16_t>(count, first, &ident, 0, k0, k1, pad);
        char what[128];
        std::snprintf(what, sizeof what, "bf16 count %zu first %llu dst offset %zu", count, first, pad);
        expect(matches(out, count, first, k0, k1, pad, id16), what);
      }
    }
  }
  std::vector<uint32_t> ident32(65536);
  for (int k = 0; k < 65536; ++k) ident32[k] = 0x3c000000u + static_cast<uint32_t>(k) * 977u;
  auto id32 = [&](uint32_t k) { return ident32[k]; };
  for (size_t pad : {size_t{0}, size_t{3}}) {
    std::vector<uint32_t> out = run<uint32_t>(big + 5, 2, &ident32, 0, 7u, 0xffffffffu, pad);
    expect(matches(out, big + 5, 2, 7u, 0xffffffffu, pad, id32), pad == 0 ? "f32 elements" : "f32 elements, unaligned");
  }
  std::vector<uint16_t> c = run<uint16_t>(37, 0, nullptr, 0x3f80, 0, 0, 1);
  expect(matches(c, 37, 0, 0, 0, 1, [](uint32_t) { return static_cast<uint16_t>(0x3f80); }), "constant bf16 1.0");
  std::printf("%s: %d failure(s)\n", failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}
