// Host emulation of the tensor-core paged MLA decode attention (kernels/mla_decode.cu, namespace
// mlad), for machines without a GPU. The build (tests/emulation/CMakeLists.txt, extract_mlad_body.py)
// cuts the kernel (namespace mlad) out of the .cu into mlad_body.inc; warp_emu.h runs each block as 256 std::threads with ldmatrix,
// mma.sync, shfl.xor and cp.async (double buffering: wait_group 1) emulated; shared memory starts
// as 0xFF (NaN) garbage. The output is compared with a float64 reference of the absorbed form
// (softmax over the row's positions of q_abs . cache rows, times the rows' first kvl columns) at
// the tolerance of tests/gpu/serving_gpu_test.cpp: each value within 2^-7 of the reference's
// magnitude plus 1e-4 of the largest.
// usage: mla_decode_emu N heads kvl rope C seed
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>

#include "kernels/mla_decode.cuh"
#include "tests/emulation/warp_emu.h"

namespace moeprof::kern {
#include <mlad_body.inc>  // generated at build time by extract_mlad_body.py
}  // namespace moeprof::kern

using namespace moeprof::kern;

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: mla_decode_emu N heads kvl rope C seed\n");
    return 2;
  }
  const int N = atoi(argv[1]), heads = atoi(argv[2]), kvl = atoi(argv[3]), rope = atoi(argv[4]), C = atoi(argv[5]);
  const int D = kvl + rope, R = 3, slots = R * C + 5;
  std::mt19937 rng(static_cast<unsigned>(atoi(argv[6])));
  if (!mlad::supported(D, kvl)) {
    std::printf("D=%d kvl=%d: not a shape of the tensor-core kernel\n", D, kvl);
    return 2;
  }
  std::uniform_real_distribution<float> U(-1, 1);
  std::vector<uint16_t> q(size_t(N) * heads * D), cache(size_t(slots) * D), out(size_t(N) * heads * kvl, 0xFFFF);
  for (auto& x : q) x = to_bf(U(rng));
  for (auto& x : cache) x = to_bf(U(rng));
  std::vector<int32_t> perm(slots), r2t(size_t(R) * C), row_req(N), row_pos(N);
  for (int i = 0; i < slots; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int i = 0; i < R * C; ++i) r2t[i] = perm[i];
  for (int n = 0; n < N; ++n) {
    row_req[n] = int(rng() % R);
    row_pos[n] = n == 0 ? C - 1 : n == 1 ? 0 : int(rng() % C);  // the longest, a single position, random
  }
  const float scale = 1.0f / std::sqrt(float(D)) * 3.0f;  // sharper than 1/sqrt(D): a peaked softmax too
  const size_t smem_size = mlad::smem_bytes(D);
  std::vector<unsigned char> smem(smem_size);
  emu::smem_base = smem.data();
  emu::smem_size = smem.size();
  const unsigned hgroups = unsigned((heads + mlad::kM - 1) / mlad::kM);
  gridDim = U3{unsigned(N), hgroups, 1};
  for (unsigned by = 0; by < hgroups; ++by)
    for (unsigned bx = 0; bx < unsigned(N); ++bx)
      emu::run_block(smem, bx, by, [&] {
        mlad::paged_attention_mma_kernel(q.data(), int64_t(heads) * D, cache.data(), D, r2t.data(), C, row_req.data(),
                                         row_pos.data(), heads, kvl, scale, out.data(), int64_t(heads) * kvl);
      });
  double num = 0, den = 0, big = 0;
  std::vector<double> ref(out.size());
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < heads; ++h) {
      const int Ln = row_pos[n] + 1;
      std::vector<double> sc(Ln);
      double mx = -1e300;
      for (int j = 0; j < Ln; ++j) {
        const uint16_t* k = &cache[size_t(r2t[size_t(row_req[n]) * C + j]) * D];
        double d = 0;
        for (int i = 0; i < D; ++i) d += double(bf(q[(size_t(n) * heads + h) * D + i])) * bf(k[i]);
        sc[j] = d * scale;
        mx = std::max(mx, sc[j]);
      }
      double l = 0;
      for (auto& x : sc) l += (x = std::exp(x - mx));
      for (int c = 0; c < kvl; ++c) {
        double o = 0;
        for (int j = 0; j < Ln; ++j) o += sc[j] * bf(cache[size_t(r2t[size_t(row_req[n]) * C + j]) * D + c]);
        ref[(size_t(n) * heads + h) * kvl + c] = o / l;
        big = std::max(big, std::fabs(o / l));
      }
    }
  long bad = 0, nonfinite = 0;
  double maxd = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double g = bf(out[i]), o = ref[i];
    if (!std::isfinite(g)) { ++nonfinite; continue; }
    num += (g - o) * (g - o);
    den += o * o;
    maxd = std::max(maxd, std::fabs(g - o));
    if (std::fabs(g - o) > std::ldexp(std::fabs(o), -7) + 1e-4 * big) ++bad;
  }
  const double rel = std::sqrt(num / den);
  const bool ok = nonfinite == 0 && bad == 0 && emu::oob == 0;
  std::printf("N=%d heads=%d kvl=%d rope=%d C=%d: normwise rel %.3e, max |diff| %.3e of max %.3e, %ld outside 2^-7 + 1e-4 max, "
              "nonfinite %ld, shared oob %ld: %s\n",
              N, heads, kvl, rope, C, rel, maxd, big, bad, nonfinite, long(emu::oob), ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
