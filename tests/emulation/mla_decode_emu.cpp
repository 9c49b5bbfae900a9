// Host emulation of the tensor-core paged MLA decode attention (kernels/mla_decode.cu, namespace
// mlad), for machines without a GPU. The build (tests/emulation/CMakeLists.txt, extract_mlad_body.py)
// cuts the kernel (namespace mlad) out of the .cu into mlad_body.inc; warp_emu.h runs each block as 256 std::threads with ldmatrix,
// mma.sync, shfl.xor and cp.async (double buffering: wait_group 1) emulated; shared memory starts
// as 0xFF (NaN) garbage. The output is compared with a float64 reference of the absorbed form
// (softmax over the row's positions of q_abs . cache rows, times the rows' first kvl columns) at
// the tolerance of tests/gpu/serving_gpu_test.cpp: each value within 2^-7 of the reference's
// magnitude plus 1e-4 of the largest. With `split` (a 7th argument of 1), the blocks run the split
// form (kernels/common/mla_split.h: each row's positions cut into mla_decode_splits() ranges,
// partial sums in a workspace that starts as NaN garbage) and the combine kernel merges them.
// An 8th argument runs the kernel with that many stages of its tile ring (2, the launcher's, or 3).
// usage: mla_decode_emu N heads kvl rope C seed [split [stages]]
//        mla_decode_emu vup N heads kvl nope v_dim seed   (the tensor-core v_up, below)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include <vector_functions.h>

#include "kernels/common/mla_split.h"
#include "kernels/mla_decode.cuh"
#include "tests/emulation/warp_emu.h"

namespace moeprof::kern {
#include <mlad_body.inc>  // generated at build time by extract_mlad_body.py
}  // namespace moeprof::kern

using namespace moeprof::kern;

// `vup N heads kvl nope v_dim seed`: the tensor-core v_up (mlad::v_up_mma_kernel) against float64,
// each output within 2^-8 of the reference's magnitude (its bf16 rounding) plus 1e-5 of the largest.
static int run_v_up(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: mla_decode_emu vup N heads kvl nope v_dim seed\n");
    return 2;
  }
  const int N = atoi(argv[2]), heads = atoi(argv[3]), kvl = atoi(argv[4]), nope = atoi(argv[5]), v_dim = atoi(argv[6]);
  std::mt19937 rng(static_cast<unsigned>(atoi(argv[7])));
  std::uniform_real_distribution<float> U(-1, 1);
  const int64_t ld_lat = int64_t(heads) * kvl + 8, ld_w = kvl, ld_out = int64_t(heads) * v_dim + 3;  // padded rows
  std::vector<uint16_t> lat(size_t(N) * ld_lat), w(size_t(heads) * (nope + v_dim) * ld_w), out(size_t(N) * ld_out, 0xFFFF);
  for (auto& x : lat) x = to_bf(U(rng));
  for (auto& x : w) x = to_bf(U(rng) * 0.1f);
  if (!mlad::v_up_mma_shape(kvl, v_dim, ld_lat, ld_w, lat.data(), w.data())) {
    std::printf("kvl=%d v_dim=%d: not a shape of the tensor-core v_up\n", kvl, v_dim);
    return 2;
  }
  std::vector<unsigned char> smem(16);
  emu::smem_base = smem.data();
  emu::smem_size = smem.size();
  const int warps = ((N + 15) / 16) * (v_dim / 8), blocks = (warps + mlad::kVuWarps - 1) / mlad::kVuWarps;
  static_assert(mlad::kVuWarps * 32 == 256, "run_block runs 256 threads");
  gridDim = U3{unsigned(blocks), unsigned(heads), 1};
  for (unsigned h = 0; h < unsigned(heads); ++h)
    for (unsigned b = 0; b < unsigned(blocks); ++b)
      emu::run_block(smem, b, h, 0, [&] {
        mlad::v_up_mma_kernel(lat.data(), ld_lat, w.data(), ld_w, kvl, N, nope, v_dim, out.data(), ld_out);
      });
  double big = 0;
  std::vector<double> ref(out.size(), 0);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < v_dim; ++j) {
        double o = 0;
        for (int c = 0; c < kvl; ++c)
          o += double(bf(lat[size_t(n) * ld_lat + size_t(h) * kvl + c])) * bf(w[(size_t(h) * (nope + v_dim) + nope + j) * ld_w + c]);
        ref[size_t(n) * ld_out + size_t(h) * v_dim + j] = o;
        big = std::max(big, std::fabs(o));
      }
  long bad = 0, untouched = 0;
  for (int n = 0; n < N; ++n)
    for (int64_t k = 0; k < ld_out; ++k) {
      const size_t i = size_t(n) * ld_out + size_t(k);
      if (k >= int64_t(heads) * v_dim) {  // the row's padding stays as it was
        if (out[i] != 0xFFFF) ++bad;
        continue;
      }
      const double g = bf(out[i]);
      if (out[i] == 0xFFFF) ++untouched;
      if (!(std::fabs(g - ref[i]) <= std::ldexp(std::fabs(ref[i]), -8) + 1e-5 * big)) ++bad;
    }
  const bool ok = bad == 0 && untouched == 0;
  std::printf("v_up N=%d heads=%d kvl=%d nope=%d v_dim=%d: %ld outside 2^-8 + 1e-5 max, %ld untouched: %s\n", N, heads, kvl, nope,
              v_dim, bad, untouched, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "vup") return run_v_up(argc, argv);
  if (argc < 7) {
    std::fprintf(stderr, "usage: mla_decode_emu N heads kvl rope C seed [split [stages]] | vup N heads kvl nope v_dim seed\n");
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
  const int stages = argc > 8 ? atoi(argv[8]) : mlad::kStages;
  if (stages != 2 && stages != 3) {
    std::fprintf(stderr, "mla_decode_emu: stages must be 2 or 3\n");
    return 2;
  }
  const size_t smem_size = mlad::smem_bytes(D, stages);
  std::vector<unsigned char> smem(smem_size);
  emu::smem_base = smem.data();
  emu::smem_size = smem.size();
  const unsigned hgroups = unsigned((heads + mlad::kM - 1) / mlad::kM);
  const bool split = argc > 7 && atoi(argv[7]) != 0;
  const int splits = split ? int(mla_decode_splits(N, heads, D, kvl)) : 1;
  if (split && splits < 2) {
    std::printf("N=%d heads=%d: the shapes do not split (mla_decode_splits = 1)\n", N, heads);
    return 2;
  }
  std::vector<float> ws(size_t(mla_decode_workspace_floats(N, heads, D, kvl)), std::nanf(""));
  gridDim = U3{unsigned(N), hgroups, unsigned(splits)};
  for (unsigned bz = 0; bz < unsigned(splits); ++bz)
    for (unsigned by = 0; by < hgroups; ++by)
      for (unsigned bx = 0; bx < unsigned(N); ++bx)
        emu::run_block(smem, bx, by, bz, [&] {
          const bool full = D == mlad::kMaxD && kvl == mlad::kMaxKvl;  // the launcher's choice
          auto* kernel = stages == 3 ? (full ? mlad::paged_attention_mma_kernel<3, true> : mlad::paged_attention_mma_kernel<3, false>)
                                     : (full ? mlad::paged_attention_mma_kernel<2, true> : mlad::paged_attention_mma_kernel<2, false>);
          kernel(q.data(), int64_t(heads) * D, cache.data(), D, r2t.data(), C, row_req.data(), row_pos.data(), heads, kvl, scale,
                 out.data(), int64_t(heads) * kvl, splits, split ? ws.data() : nullptr);
        });
  if (split) {  // the combine kernel: no shared memory or barriers, so its threads run in turn
    gridDim = U3{unsigned(N), unsigned(heads), 1};
    for (unsigned n = 0; n < unsigned(N); ++n)
      for (unsigned h = 0; h < unsigned(heads); ++h)
        for (unsigned t = 0; t < 128; ++t) {
          threadIdx = U3{t, 0, 0};
          blockIdx = U3{n, h, 0};
          blockDim = U3{128, 1, 1};
          mlad::mla_decode_combine_kernel(ws.data(), splits, heads, kvl, out.data(), int64_t(heads) * kvl);
        }
  }
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
  std::printf("N=%d heads=%d kvl=%d rope=%d C=%d splits=%d: normwise rel %.3e, max |diff| %.3e of max %.3e, %ld outside 2^-7 + 1e-4 max, "
              "nonfinite %ld, shared oob %ld: %s\n",
              N, heads, kvl, rope, C, splits, rel, maxd, big, bad, nonfinite, long(emu::oob), ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
