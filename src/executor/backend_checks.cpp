// The op contract: Backend's public ops check their arguments here, once, with the same rules
// and messages for every backend, and then call the backend's do_<op>. The rules are the union of
// what the backends need (the CUDA kernels' contiguity and limits included), so a call that one
// backend accepts is accepted by all. A violation returns Status::bad_input with one line
// "<op>: <arg> must ... (got ...)", naming the first argument that breaks a rule; nothing is
// computed or written.
//
// Rules that depend on tensor contents (expert ids, positions, offsets) cannot be checked here
// without reading device memory; the CPU reference checks them where it reads them.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "kernels/common/mla_split.h"

namespace moeprof {
namespace {

std::string dims(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

// " (got bf16 37x272)", with the row stride when the view is not contiguous.
std::string got(const Tensor& t) {
  std::string s = " (got " + std::string(dtype_name(t.dtype())) + " " + t.shape_string();
  if (!t.contiguous()) s += " with row stride " + std::to_string(t.ld());
  return s + ")";
}
std::string got(int64_t v) { return " (got " + std::to_string(v) + ")"; }

// The one failure form: "<op>: <arg> must <rule>".
Status fail(const char* op, const char* arg, const std::string& rule) {
  return Status::bad_input(std::string(op) + ": " + arg + " must " + rule);
}

Status need_defined(const char* op, const char* arg, const Tensor& t) {
  if (!t.defined()) return fail(op, arg, "be defined");
  return Status::ok();
}

Status need_dtype(const char* op, const char* arg, const Tensor& t, DType dt) {
  MOEPROF_RETURN_IF_ERROR(need_defined(op, arg, t));
  if (t.dtype() != dt) return fail(op, arg, "be " + std::string(dtype_name(dt)) + got(t));
  return Status::ok();
}

Status need_dtype(const char* op, const char* arg, const Tensor& t, DType a, DType b) {
  MOEPROF_RETURN_IF_ERROR(need_defined(op, arg, t));
  if (t.dtype() != a && t.dtype() != b)
    return fail(op, arg, "be " + std::string(dtype_name(a)) + " or " + std::string(dtype_name(b)) + got(t));
  return Status::ok();
}

// Exact rows x cols (dtype checked before).
Status need_dims(const char* op, const char* arg, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.rows() != rows || t.cols() != cols) return fail(op, arg, "be " + dims(rows, cols) + got(t));
  return Status::ok();
}

// dtype and exact rows x cols: "must be bf16 37x272 (got bf16 37x16)".
Status need_shape(const char* op, const char* arg, const Tensor& t, DType dt, int64_t rows, int64_t cols) {
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, arg, t, dt));
  if (t.rows() != rows || t.cols() != cols)
    return fail(op, arg, "be " + std::string(dtype_name(dt)) + " " + dims(rows, cols) + got(t));
  return Status::ok();
}

Status need_contiguous(const char* op, const char* arg, const Tensor& t) {
  if (!t.contiguous()) return fail(op, arg, "be contiguous" + got(t));
  return Status::ok();
}

// A contiguous vector of n elements of dtype dt (any rows x cols with rows * cols == n).
Status need_vector(const char* op, const char* arg, const Tensor& t, DType dt, int64_t n) {
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, arg, t, dt));
  if (t.numel() != n) return fail(op, arg, "have " + std::to_string(n) + " elements" + got(t));
  return need_contiguous(op, arg, t);
}

// A contiguous index vector of at least `min_n` elements; `what` names the bound.
Status need_index_vector(const char* op, const char* arg, const Tensor& t, int64_t min_n, const std::string& what) {
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, arg, t, DType::kI32));
  if (t.numel() < min_n) return fail(op, arg, "have at least " + what + " = " + std::to_string(min_n) + " elements" + got(t));
  return need_contiguous(op, arg, t);
}

Status need_positive(const char* op, const char* arg, int64_t v) {
  if (v <= 0) return fail(op, arg, "be positive" + got(v));
  return Status::ok();
}

Status need_non_negative(const char* op, const char* arg, int64_t v) {
  if (v < 0) return fail(op, arg, "be non-negative" + got(v));
  return Status::ok();
}

// NVFP4 codes: fp4x2 with `dim`/2 columns, `dim` a positive multiple of 16 (the block size).
Status need_fp4_width(const char* op, const char* arg, const Tensor& t, const char* dim) {
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, arg, t, DType::kFP4x2));
  const int64_t n = 2 * t.cols();
  if (n <= 0 || n % 16 != 0)
    return fail(op, arg, "have " + std::string(dim) + "/2 columns with " + dim + " a positive multiple of 16" + got(t));
  return Status::ok();
}

// FP4 code rows read 8 bytes at a time (the CUDA grouped GEMM): an 8-byte aligned first row and a
// row stride that is a multiple of 8 bytes (fp4x2 elements are bytes).
Status need_aligned_rows(const char* op, const char* arg, const Tensor& t) {
  const auto address = reinterpret_cast<uintptr_t>(t.raw());
  if (address % 8 != 0 || t.ld() % 8 != 0)
    return fail(op, arg, "have 8-byte aligned rows (got " + std::string(dtype_name(t.dtype())) + " " + t.shape_string() +
                             " at address % 8 = " + std::to_string(address % 8) + " with row stride " +
                             std::to_string(t.ld()) + ")");
  return Status::ok();
}

// Expert offsets: contiguous i32 [E + 1] with E >= 1.
Status need_offsets(const char* op, const Tensor& offsets) {
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "offsets", offsets, DType::kI32));
  if (offsets.numel() < 2) return fail(op, "offsets", "have E + 1 elements with E >= 1" + got(offsets));
  return need_contiguous(op, "offsets", offsets);
}

// The bytes an op must move for tensor t at least (its elements, read or written once).
double tb(const Tensor& t) { return t.defined() ? static_cast<double>(t.bytes()) : 0.0; }

// Causal attention: query t attends to keys 0..t, so sum_t (t + 1) = T(T+1)/2 key rows per head,
// each a qk_dim dot product and a v_dim accumulation (2 FLOPs per multiply-add). Bytes: q, k, v
// read once, out written once (bf16).
OpCost attention_cost(int64_t T, int64_t heads, int64_t qk_dim, int64_t v_dim) {
  const double t = static_cast<double>(T), h = static_cast<double>(heads);
  return OpCost{h * static_cast<double>(qk_dim + v_dim) * t * (t + 1), 2.0 * t * h * (2.0 * qk_dim + 2.0 * v_dim)};
}

// The expert GEMMs count FLOPs on the routed rows (T * top_k of the latest moe_permute), not on
// the padding; bytes: the routed rows of the activations, the weights of the experts the latest
// moe_permute routed at least one row to (hit of E; all of them where it was not counted), once,
// and the whole padded output. At decode a batch hits a part of the experts, and a kernel that
// reads only theirs must not be charged for the others (its time would fall below its floor).
int64_t useful_rows(int64_t moe_rows, int64_t padded) { return moe_rows > 0 && moe_rows <= padded ? moe_rows : padded; }
double hit_share(int64_t hit, int64_t experts) {
  return hit >= 0 && experts > 0 && hit <= experts ? static_cast<double>(hit) / static_cast<double>(experts) : 1.0;
}

OpCost gemm1_cost(const Tensor& a, const Tensor& a_scales, const Tensor& w13, const Tensor& w13_scales,
                  const Tensor& out, const Tensor& out_scales, int64_t moe_rows, double hit) {
  const double R = static_cast<double>(useful_rows(moe_rows, out.rows()));
  const double H = 2.0 * a.cols(), two_i = 4.0 * out.cols();
  return OpCost{2.0 * R * two_i * H, R * static_cast<double>(a.cols() + a_scales.cols()) +
                                         hit * (tb(w13) + tb(w13_scales)) + tb(out) + tb(out_scales)};
}

OpCost gemm2_cost(const Tensor& h, const Tensor& h_scales, const Tensor& w2, const Tensor& w2_scales, const Tensor& out,
                  int64_t moe_rows, double hit) {
  const double R = static_cast<double>(useful_rows(moe_rows, out.rows()));
  const double I = 2.0 * h.cols(), H = static_cast<double>(out.cols());
  return OpCost{2.0 * R * H * I,
                R * static_cast<double>(h.cols() + h_scales.cols()) + hit * (tb(w2) + tb(w2_scales)) + tb(out)};
}

}  // namespace

Result<OpProfile> Backend::take_op_profile() {
  if (!op_profiler_) return Status::bad_input("op timing: start_op_profile() was not called");
  std::unique_ptr<OpProfiler> p = std::move(op_profiler_);
  MOEPROF_RETURN_IF_ERROR(synchronize());
  return p->finish();
}

// ---- data movement --------------------------------------------------------------------------

Status Backend::copy_from_host(Tensor& dst, const void* src) {
  const char* op = "copy_from_host";
  MOEPROF_RETURN_IF_ERROR(need_defined(op, "dst", dst));
  if (src == nullptr && dst.numel() > 0) return fail(op, "src", "be a host pointer (got null)");
  OpTimer timer(op_timer_target(), "copy_from_host", OpCost{0, tb(dst)});
  return do_copy_from_host(dst, src);
}

Status Backend::copy_to_host(const Tensor& src, void* dst) {
  const char* op = "copy_to_host";
  MOEPROF_RETURN_IF_ERROR(need_defined(op, "src", src));
  if (dst == nullptr && src.numel() > 0) return fail(op, "dst", "be a host pointer (got null)");
  OpTimer timer(op_timer_target(), "copy_to_host", OpCost{0, tb(src)});
  return do_copy_to_host(src, dst);
}

// ---- deterministic initialization ------------------------------------------------------------

Status Backend::init_uniform(Tensor& t, uint64_t seed, float scale) {
  MOEPROF_RETURN_IF_ERROR(need_dtype("init_uniform", "t", t, DType::kBF16, DType::kF32));
  OpTimer timer(op_timer_target(), "init_uniform", OpCost{0, tb(t)});
  return do_init_uniform(t, seed, scale);
}

Status Backend::init_e4m3(Tensor& t, uint64_t seed, float lo, float hi) {
  MOEPROF_RETURN_IF_ERROR(need_dtype("init_e4m3", "t", t, DType::kE4M3));
  OpTimer timer(op_timer_target(), "init_e4m3", OpCost{0, tb(t)});
  return do_init_e4m3(t, seed, lo, hi);
}

Status Backend::init_bytes(Tensor& t, uint64_t seed) {
  MOEPROF_RETURN_IF_ERROR(need_dtype("init_bytes", "t", t, DType::kU8, DType::kFP4x2));
  OpTimer timer(op_timer_target(), "init_bytes", OpCost{0, tb(t)});
  return do_init_bytes(t, seed);
}

namespace {
// init_moe_w13 / init_moe_w2's arguments: codes w [E * per_expert * N, K/2] fp4x2 and scales
// [same rows, K/16] e4m3, both contiguous (rows: "E*2I" or "E*H"; k_dim: "H" or "I").
Status check_moe_weights(const char* op, const char* w_name, const char* s_name, const Tensor& w, const Tensor& s,
                         int64_t num_experts, int64_t per_expert, const char* rows, const char* k_dim) {
  if (num_experts < 1) return fail(op, "num_experts", "be >= 1 (got " + std::to_string(num_experts) + ")");
  MOEPROF_RETURN_IF_ERROR(need_fp4_width(op, w_name, w, k_dim));
  const int64_t R = w.rows(), K = 2 * w.cols();
  if (R < per_expert * num_experts || R % (per_expert * num_experts) != 0)
    return fail(op, w_name, std::string("have ") + rows + " rows for E = " + std::to_string(num_experts) + got(w));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, w_name, w));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, s_name, s, DType::kE4M3, R, K / 16));
  return need_contiguous(op, s_name, s);
}
}  // namespace

Status Backend::init_moe_w13(Tensor& w13, Tensor& w13_scales, int64_t num_experts, uint64_t seed_codes,
                             uint64_t seed_scales, float lo, float hi) {
  const char* op = "init_moe_w13";
  MOEPROF_RETURN_IF_ERROR(check_moe_weights(op, "w13", "w13_scales", w13, w13_scales, num_experts, 2, "E*2I", "H"));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(w13) + tb(w13_scales)});
  return do_init_moe_w13(w13, w13_scales, num_experts, seed_codes, seed_scales, lo, hi);
}

Status Backend::init_moe_w2(Tensor& w2, Tensor& w2_scales, int64_t num_experts, uint64_t seed_codes,
                            uint64_t seed_scales, float lo, float hi) {
  const char* op = "init_moe_w2";
  MOEPROF_RETURN_IF_ERROR(check_moe_weights(op, "w2", "w2_scales", w2, w2_scales, num_experts, 1, "E*H", "I"));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(w2) + tb(w2_scales)});
  return do_init_moe_w2(w2, w2_scales, num_experts, seed_codes, seed_scales, lo, hi);
}

Status Backend::init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi) {
  MOEPROF_RETURN_IF_ERROR(need_dtype("init_ints", "t", t, DType::kI32));
  if (hi <= lo)
    return fail("init_ints", "hi", "be greater than lo (got [" + std::to_string(lo) + ", " + std::to_string(hi) + "))");
  OpTimer timer(op_timer_target(), "init_ints", OpCost{0, tb(t)});
  return do_init_ints(t, seed, lo, hi);
}

Status Backend::iota(Tensor& t, int32_t start) {
  MOEPROF_RETURN_IF_ERROR(need_dtype("iota", "t", t, DType::kI32));
  OpTimer timer(op_timer_target(), "iota", OpCost{0, tb(t)});
  return do_iota(t, start);
}

// ---- dense ops ---------------------------------------------------------------------------------

Status Backend::embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const char* op = "embedding";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "ids", ids, DType::kI32));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "ids", ids));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "table", table, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out", out, DType::kBF16, ids.numel(), table.cols()));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(ids) + 2 * tb(out)});
  return do_embedding(ids, table, vocab_start, out);
}

Status Backend::rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const char* op = "rmsnorm";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "x", x, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "w", w, DType::kBF16, x.cols()));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out", out, DType::kBF16, x.rows(), x.cols()));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(x) + tb(w) + tb(out)});
  return do_rmsnorm(x, w, eps, out);
}

Status Backend::fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  const char* op = "fused_add_rmsnorm";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "x", x, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "residual", residual, DType::kBF16, x.rows(), x.cols()));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "w", w, DType::kBF16, x.cols()));
  OpTimer timer(op_timer_target(), op, OpCost{0, 2 * tb(x) + 2 * tb(residual) + tb(w)});
  return do_fused_add_rmsnorm(x, residual, w, eps);
}

Status Backend::add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) {
  const char* op = "add_rmsnorm";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "x", x, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "residual", residual, DType::kBF16, x.rows(), x.cols()));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "w", w, DType::kBF16, x.cols()));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out", out, DType::kBF16, x.rows(), x.cols()));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(x) + 2 * tb(residual) + tb(w) + tb(out)});
  return do_add_rmsnorm(x, residual, w, eps, out);
}

Status Backend::linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& workspace) {
  const char* op = "linear";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "x", x, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "w", w, DType::kBF16));
  if (w.cols() != x.cols())
    return fail(op, "w", "have K = " + std::to_string(x.cols()) + " columns, like x" + got(w));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "out", out, DType::kBF16, DType::kF32));
  MOEPROF_RETURN_IF_ERROR(need_dims(op, "out", out, x.rows(), w.rows()));
  OpTimer timer(op_timer_target(), op, OpCost{2.0 * x.rows() * w.rows() * x.cols(), tb(x) + tb(w) + tb(out),
                                                 op_profiling() ? std::to_string(x.rows()) + " x " + std::to_string(w.rows()) +
                                                                      " x " + std::to_string(x.cols()) +
                                                                      (out.dtype() == DType::kF32 ? " -> f32" : "")
                                                               : std::string()});
  return do_linear(x, w, out, workspace);
}

Status Backend::prepare_linear(int64_t rows, int64_t n, int64_t k, DType out_dtype, size_t workspace_bytes) {
  const char* op = "prepare_linear";
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "rows", rows));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "n", n));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "k", k));
  if (out_dtype != DType::kBF16 && out_dtype != DType::kF32)
    return fail(op, "out_dtype", std::string("be bf16 or f32 (got ") + std::string(dtype_name(out_dtype)) + ")");
  return do_prepare_linear(rows, n, k, out_dtype, workspace_bytes);
}

Status Backend::rope(Tensor& x, int64_t n_heads, int64_t head_stride, int64_t rot_offset, int64_t rot_dim,
                     const Tensor& positions, const Tensor& cos_sin) {
  const char* op = "rope";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "x", x, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "n_heads", n_heads));
  if (rot_dim <= 0 || rot_dim % 2 != 0) return fail(op, "rot_dim", "be positive and even" + got(rot_dim));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "rot_offset", rot_offset));
  if (n_heads > 1 && head_stride < rot_offset + rot_dim)
    return fail(op, "head_stride", "be at least rot_offset + rot_dim = " + std::to_string(rot_offset + rot_dim) +
                                       " (rotary columns of different heads must not overlap)" + got(head_stride));
  const int64_t span = (n_heads - 1) * head_stride + rot_offset + rot_dim;
  if (span > x.cols())
    return fail(op, "x", "have at least (n_heads - 1) * head_stride + rot_offset + rot_dim = " + std::to_string(span) +
                             " columns" + got(x));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "positions", positions, DType::kI32, x.rows()));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "cos_sin", cos_sin, DType::kF32));
  if (cos_sin.cols() != rot_dim)
    return fail(op, "cos_sin", "have rot_dim = " + std::to_string(rot_dim) + " columns" + got(cos_sin));
  OpTimer timer(op_timer_target(), op, OpCost{0, 2.0 * x.rows() * n_heads * rot_dim * dtype_size(DType::kBF16) + tb(positions) + tb(cos_sin)});
  return do_rope(x, n_heads, head_stride, rot_offset, rot_dim, positions, cos_sin);
}

Status Backend::mla_build_k(const Tensor& kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                            const Tensor& k_pe, Tensor& k) {
  const char* op = "mla_build_k";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "kv", kv, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "n_heads", n_heads));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "kv_head_stride", kv_head_stride));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "nope", nope));
  const int64_t span = (n_heads - 1) * kv_head_stride + nope;
  if (span > kv.cols())
    return fail(op, "kv", "have at least (n_heads - 1) * kv_head_stride + nope = " + std::to_string(span) + " columns" +
                              got(kv));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "k_pe", k_pe, DType::kBF16));
  if (k_pe.rows() != kv.rows()) return fail(op, "k_pe", "have kv's " + std::to_string(kv.rows()) + " rows" + got(k_pe));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "k", k, DType::kBF16, kv.rows(), n_heads * (nope + k_pe.cols())));
  OpTimer timer(op_timer_target(), op, OpCost{0, 2 * tb(k)});
  return do_mla_build_k(kv, n_heads, kv_head_stride, nope, k_pe, k);
}

Status Backend::kv_cache_write(const Tensor& latent, const Tensor& k_pe, Tensor& cache, int64_t slot0) {
  const char* op = "kv_cache_write";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "latent", latent, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "k_pe", k_pe, DType::kBF16));
  const int64_t T = latent.rows();
  if (k_pe.rows() != T) return fail(op, "k_pe", "have latent's " + std::to_string(T) + " rows" + got(k_pe));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "cache", cache, DType::kBF16));
  if (cache.cols() != latent.cols() + k_pe.cols())
    return fail(op, "cache", "have latent + k_pe = " + std::to_string(latent.cols() + k_pe.cols()) + " columns" +
                                 got(cache));
  if (slot0 < 0 || slot0 + T > cache.rows())
    return fail(op, "slot0", "be in [0, " + std::to_string(cache.rows() - T) + "] so that " + std::to_string(T) +
                                 " rows fit the cache's " + std::to_string(cache.rows()) + got(slot0));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(latent) + tb(k_pe) + static_cast<double>(latent.rows()) * cache.cols() * dtype_size(DType::kBF16)});
  return do_kv_cache_write(latent, k_pe, cache, slot0);
}

Status Backend::causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_heads, int64_t qk_dim,
                                 int64_t v_dim, int64_t v_offset, int64_t v_head_stride, float scale, Tensor& out) {
  const char* op = "causal_attention";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "q", q, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "n_heads", n_heads));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "qk_dim", qk_dim));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "v_dim", v_dim));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "v_offset", v_offset));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "v_head_stride", v_head_stride));
  const int64_t T = q.rows(), qk_cols = n_heads * qk_dim;
  // q/k heads are packed at a stride of qk_dim columns (the interface has no separate q/k stride).
  if (q.cols() < qk_cols)
    return fail(op, "q", "have at least n_heads * qk_dim = " + std::to_string(qk_cols) + " columns" + got(q));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "k", k, DType::kBF16));
  if (k.rows() != T || k.cols() < qk_cols)
    return fail(op, "k", "have q's " + std::to_string(T) + " rows and at least n_heads * qk_dim = " +
                             std::to_string(qk_cols) + " columns" + got(k));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "v", v, DType::kBF16));
  const int64_t v_span = v_offset + (n_heads - 1) * v_head_stride + v_dim;
  if (v.rows() != T || v.cols() < v_span)
    return fail(op, "v", "have q's " + std::to_string(T) + " rows and at least v_offset + (n_heads - 1) * " +
                             "v_head_stride + v_dim = " + std::to_string(v_span) + " columns" + got(v));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out", out, DType::kBF16, T, n_heads * v_dim));
  OpTimer timer(op_timer_target(), op, attention_cost(q.rows(), n_heads, qk_dim, v_dim));
  return do_causal_attention(q, k, v, n_heads, qk_dim, v_dim, v_offset, v_head_stride, scale, out);
}

Status Backend::silu_and_mul(const Tensor& x, Tensor& out) {
  const char* op = "silu_and_mul";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "x", x, DType::kBF16));
  if (x.cols() % 2 != 0) return fail(op, "x", "have an even number of columns [gate | up]" + got(x));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out", out, DType::kBF16, x.rows(), x.cols() / 2));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(x) + tb(out)});
  return do_silu_and_mul(x, out);
}

Status Backend::add_inplace(Tensor& dst, const Tensor& src) {
  const char* op = "add_inplace";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "dst", dst, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "src", src, DType::kBF16, dst.rows(), dst.cols()));
  OpTimer timer(op_timer_target(), op, OpCost{0, 2 * tb(dst) + tb(src)});
  return do_add_inplace(dst, src);
}

Status Backend::all_reduce(Tensor& t) {
  MOEPROF_RETURN_IF_ERROR(need_dtype("all_reduce", "t", t, DType::kBF16, DType::kF32));
  MOEPROF_RETURN_IF_ERROR(need_contiguous("all_reduce", "t", t));
  // A ring all-reduce moves about 2x the tensor through each rank; a no-op moves nothing.
  OpTimer timer(op_timer_target(), "all_reduce", OpCost{0, collectives_real() ? 2 * tb(t) : 0.0});
  return do_all_reduce(t);
}

namespace {
// The counts of a rows collective: one per rank, none negative; their sum (rows).
Result<int64_t> rank_rows(const char* op, const char* arg, const std::vector<int64_t>& rows, int ranks) {
  if (static_cast<int>(rows.size()) != ranks)
    return Status::bad_input(std::string(op) + ": " + arg + " has " + std::to_string(rows.size()) + " counts for " +
                             std::to_string(ranks) + " ranks");
  int64_t sum = 0;
  for (int64_t r : rows) {
    if (r < 0) return Status::bad_input(std::string(op) + ": " + arg + " has a negative count " + std::to_string(r));
    sum += r;
  }
  return sum;
}
std::vector<size_t> rows_to_bytes(const std::vector<int64_t>& rows, size_t row_bytes) {
  std::vector<size_t> b(rows.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<size_t>(rows[i]) * row_bytes;
  return b;
}
}  // namespace

Status Backend::all_to_all_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                                const std::vector<int64_t>& recv_rows) {
  const char* op = "all_to_all_rows";
  const int n = collective_size();
  MOEPROF_ASSIGN_OR_RETURN(int64_t ns, rank_rows(op, "send_rows", send_rows, n));
  MOEPROF_ASSIGN_OR_RETURN(int64_t nr, rank_rows(op, "recv_rows", recv_rows, n));
  const Tensor* any = send.defined() ? &send : (recv.defined() ? &recv : nullptr);
  if (ns > 0 && (!send.defined() || ns > send.rows()))
    return Status::bad_input(std::string(op) + ": " + std::to_string(ns) + " rows to send, send has " +
                             std::to_string(send.defined() ? send.rows() : 0));
  if (nr > 0 && (!recv.defined() || nr > recv.rows()))
    return Status::bad_input(std::string(op) + ": " + std::to_string(nr) + " rows to receive, recv has " +
                             std::to_string(recv.defined() ? recv.rows() : 0));
  if (send.defined()) MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "send", send));
  if (recv.defined()) MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "recv", recv));
  if (send.defined() && recv.defined() && (send.dtype() != recv.dtype() || send.cols() != recv.cols()))
    return Status::bad_input(std::string(op) + ": send and recv differ in dtype or columns");
  if (n == 1 && send_rows[0] != recv_rows[0])  // one rank sends its rows to itself
    return Status::bad_input(std::string(op) + ": one rank sends itself " + std::to_string(send_rows[0]) + " rows and expects " +
                             std::to_string(recv_rows[0]));
  const size_t row_bytes = any == nullptr ? 0 : static_cast<size_t>(any->cols()) * dtype_size(any->dtype());
  OpTimer timer(op_timer_target(), op,
                OpCost{0, collectives_real() ? static_cast<double>(ns + nr) * static_cast<double>(row_bytes) : 0.0});
  return do_all_to_all_bytes(send.defined() ? send.raw() : nullptr, rows_to_bytes(send_rows, row_bytes),
                             recv.defined() ? recv.raw() : nullptr, rows_to_bytes(recv_rows, row_bytes));
}

Status Backend::all_gather_rows(Tensor& t, const std::vector<int64_t>& rows) {
  const char* op = "all_gather_rows";
  MOEPROF_ASSIGN_OR_RETURN(int64_t n, rank_rows(op, "rows", rows, collective_size()));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "t", t));
  if (n > t.rows())
    return Status::bad_input(std::string(op) + ": slices of " + std::to_string(n) + " rows in a tensor of " + std::to_string(t.rows()));
  const size_t row_bytes = static_cast<size_t>(t.cols()) * dtype_size(t.dtype());
  OpTimer timer(op_timer_target(), op, OpCost{0, collectives_real() ? static_cast<double>(n) * static_cast<double>(row_bytes) : 0.0});
  return do_all_gather_bytes(t.raw(), rows_to_bytes(rows, row_bytes));
}

// ---- paged MLA ---------------------------------------------------------------------------------

Status Backend::kv_cache_store(const Tensor& latent, const Tensor& k_pe, Tensor& cache, const Tensor& slots) {
  const char* op = "kv_cache_store";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "latent", latent, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "k_pe", k_pe, DType::kBF16));
  const int64_t N = latent.rows();
  if (k_pe.rows() != N) return fail(op, "k_pe", "have latent's " + std::to_string(N) + " rows" + got(k_pe));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "cache", cache, DType::kBF16));
  if (cache.cols() != latent.cols() + k_pe.cols())
    return fail(op, "cache", "have latent + k_pe = " + std::to_string(latent.cols() + k_pe.cols()) + " columns" + got(cache));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "cache", cache));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "slots", slots, DType::kI32, N));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(latent) + tb(k_pe) + tb(slots) + static_cast<double>(N) * cache.cols() * 2});
  return do_kv_cache_store(latent, k_pe, cache, slots);
}

Status Backend::mla_q_absorb(const Tensor& q, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t rope,
                             int64_t v_dim, Tensor& q_abs) {
  const char* op = "mla_q_absorb";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "q", q, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "n_heads", n_heads));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "nope", nope));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "rope", rope));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "v_dim", v_dim));
  if (q.cols() < n_heads * (nope + rope))
    return fail(op, "q", "have at least n_heads * (nope + rope) = " + std::to_string(n_heads * (nope + rope)) + " columns" + got(q));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "kv_b", kv_b, DType::kBF16));
  if (kv_b.rows() != n_heads * (nope + v_dim) || kv_b.cols() <= 0)
    return fail(op, "kv_b", "have n_heads * (nope + v_dim) = " + std::to_string(n_heads * (nope + v_dim)) + " rows" + got(kv_b));
  const int64_t kvl = kv_b.cols();
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "q_abs", q_abs, DType::kBF16, q.rows(), n_heads * (kvl + rope)));
  OpTimer timer(op_timer_target(), op, OpCost{2.0 * q.rows() * n_heads * nope * kvl, tb(q) + tb(kv_b) + tb(q_abs)});
  return do_mla_q_absorb(q, kv_b, n_heads, nope, rope, v_dim, q_abs);
}

size_t Backend::mla_paged_attention_workspace_bytes(int64_t N, int64_t n_heads, int64_t D, int64_t kvl) const {
  return static_cast<size_t>(kern::mla_decode_workspace_floats(N, n_heads, D, kvl)) * sizeof(float);
}

Status Backend::mla_paged_attention(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token,
                                    const Tensor& row_req, const Tensor& row_pos, int64_t n_heads, float scale,
                                    Tensor& out, const Tensor& workspace) {
  const char* op = "mla_paged_attention";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "q_abs", q_abs, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "n_heads", n_heads));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "cache", cache, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "cache", cache));
  const int64_t N = q_abs.rows(), D = cache.cols();
  if (q_abs.cols() != n_heads * D)
    return fail(op, "q_abs", "have n_heads * cols(cache) = " + std::to_string(n_heads * D) + " columns" + got(q_abs));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "req_to_token", req_to_token, DType::kI32));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "req_to_token", req_to_token));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "row_req", row_req, DType::kI32, N));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "row_pos", row_pos, DType::kI32, N));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "out", out, DType::kBF16));
  if (out.rows() != N || out.cols() % n_heads != 0 || out.cols() / n_heads <= 0 || out.cols() / n_heads > D)
    return fail(op, "out", "have q_abs's " + std::to_string(N) + " rows and n_heads * kvl columns with 0 < kvl <= cols(cache) = " +
                               std::to_string(D) + got(out));
  if (workspace.defined()) {
    MOEPROF_RETURN_IF_ERROR(need_dtype(op, "workspace", workspace, DType::kF32));
    MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "workspace", workspace));
    const size_t need = mla_paged_attention_workspace_bytes(N, n_heads, D, out.cols() / n_heads);
    if (workspace.bytes() < need)
      return fail(op, "workspace", "hold at least mla_paged_attention_workspace_bytes(N, n_heads, cols(cache), kvl) = " +
                                       std::to_string(need) + " bytes, or be undefined (got " + std::to_string(workspace.bytes()) + ")");
  }
  // FLOPs depend on the positions (device data): the cost counts the bytes of q_abs and out only.
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(q_abs) + tb(out) + tb(row_req) + tb(row_pos)});
  return do_mla_paged_attention(q_abs, cache, req_to_token, row_req, row_pos, n_heads, scale, out, workspace);
}

Status Backend::mla_v_up(const Tensor& lat, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t v_dim, Tensor& out) {
  const char* op = "mla_v_up";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "lat", lat, DType::kBF16));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "n_heads", n_heads));
  MOEPROF_RETURN_IF_ERROR(need_non_negative(op, "nope", nope));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "v_dim", v_dim));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "kv_b", kv_b, DType::kBF16));
  if (kv_b.rows() != n_heads * (nope + v_dim) || kv_b.cols() <= 0)
    return fail(op, "kv_b", "have n_heads * (nope + v_dim) = " + std::to_string(n_heads * (nope + v_dim)) + " rows" + got(kv_b));
  const int64_t kvl = kv_b.cols();
  if (lat.cols() != n_heads * kvl)
    return fail(op, "lat", "have n_heads * cols(kv_b) = " + std::to_string(n_heads * kvl) + " columns" + got(lat));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out", out, DType::kBF16, lat.rows(), n_heads * v_dim));
  OpTimer timer(op_timer_target(), op, OpCost{2.0 * lat.rows() * n_heads * v_dim * kvl, tb(lat) + tb(kv_b) + tb(out)});
  return do_mla_v_up(lat, kv_b, n_heads, nope, v_dim, out);
}

// ---- MoE ---------------------------------------------------------------------------------------

Status Backend::router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                            Tensor& topk_weights) {
  const char* op = "router_topk";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "logits", logits, DType::kF32));
  const int64_t T = logits.rows(), E = logits.cols();
  // 32: one warp lane per selected expert; 64: the selected groups are a 64-bit mask (CUDA kernel).
  if (p.top_k < 1 || p.top_k > 32 || p.top_k > E)
    return fail(op, "top_k", "be in [1, min(32, E = " + std::to_string(E) + ")]" + got(p.top_k));
  if (p.n_group < 1 || p.n_group > 64 || E % p.n_group != 0)
    return fail(op, "n_group", "be in [1, 64] and divide E = " + std::to_string(E) + got(p.n_group));
  if (p.topk_group < 1 || p.topk_group > p.n_group)
    return fail(op, "topk_group", "be in [1, n_group = " + std::to_string(p.n_group) + "]" + got(p.topk_group));
  if (p.method != TopkMethod::kGreedy) {
    const int64_t selectable = static_cast<int64_t>(p.topk_group) * (E / p.n_group);
    if (p.top_k > selectable)
      return fail(op, "top_k", "be at most topk_group * E / n_group = " + std::to_string(selectable) +
                                   " (the experts of the kept groups)" + got(p.top_k));
  }
  if (p.method == TopkMethod::kNoauxTc) MOEPROF_RETURN_IF_ERROR(need_vector(op, "bias", bias, DType::kF32, E));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "topk_ids", topk_ids, DType::kI32, T, p.top_k));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "topk_weights", topk_weights, DType::kF32, T, p.top_k));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(logits) + tb(bias) + tb(topk_ids) + tb(topk_weights)});
  return do_router_topk(logits, bias, p, topk_ids, topk_weights);
}

Status Backend::fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales) {
  const char* op = "fp4_quantize";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "x", x, DType::kBF16));
  if (x.cols() % 16 != 0) return fail(op, "x", "have K columns with K a multiple of 16" + got(x));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out", out, DType::kFP4x2, x.rows(), x.cols() / 2));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "scales", scales, DType::kE4M3, x.rows(), x.cols() / 16));
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(x) + tb(out) + tb(scales)});
  return do_fp4_quantize(x, global_scale, out, scales);
}

Status Backend::moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile, Tensor& offsets,
                            Tensor& permuted_to_token, Tensor& expanded_to_permuted, const Tensor& workspace) {
  const char* op = "moe_permute";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "topk_ids", topk_ids, DType::kI32));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "topk_ids", topk_ids));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "num_experts", num_experts));
  MOEPROF_RETURN_IF_ERROR(need_positive(op, "tile", tile));
  const int64_t T = topk_ids.rows(), k = topk_ids.cols(), E = num_experts;
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "offsets", offsets, DType::kI32, E + 1));
  // The bound holds every routing; a smaller P is a runner sized by the routed counts: a multiple
  // of the tile, at least T*k (the CPU reference checks the routing's rows on the host).
  const int64_t bound = T * k + E * (tile - 1), P = permuted_to_token.numel();
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "permuted_to_token", permuted_to_token, DType::kI32));
  if (P < bound && (P < T * k || P % tile != 0))
    return fail(op, "permuted_to_token",
                "have at least T*k + E*(tile-1) = " + std::to_string(bound) + " elements, or a multiple of tile = " +
                    std::to_string(tile) + " of at least T*k = " + std::to_string(T * k) + " (the routed rows)" + got(permuted_to_token));
  MOEPROF_RETURN_IF_ERROR(need_contiguous(op, "permuted_to_token", permuted_to_token));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "expanded_to_permuted", expanded_to_permuted, DType::kI32, T * k));
  const size_t need = moe_permute_workspace_bytes(T, k, E);
  const size_t have = workspace.defined() ? workspace.bytes() : 0;
  if (have < need)
    return fail(op, "workspace", "hold at least moe_permute_workspace_bytes(T, k, E) = " + std::to_string(need) +
                                     " bytes (got " + std::to_string(have) + ")");
  moe_rows_ = T * k;
  moe_hit_experts_ = moe_experts_ = 0;
  if (op_timer_target() != nullptr && computes() && topk_ids.numel() > 0) {
    // Op times only (eager runs): the hit experts, from a host copy of the ids taken outside any
    // op's timer. Ids outside [0, E) route no row.
    std::vector<int32_t> ids(static_cast<size_t>(topk_ids.numel()));
    MOEPROF_RETURN_IF_ERROR(do_copy_to_host(topk_ids, ids.data()));
    std::vector<char> hit(static_cast<size_t>(E), 0);
    for (int32_t e : ids)
      if (e >= 0 && e < E) hit[static_cast<size_t>(e)] = 1;
    moe_hit_experts_ = std::count(hit.begin(), hit.end(), 1);
    moe_experts_ = E;
  }
  OpTimer timer(op_timer_target(), op, OpCost{0, tb(topk_ids) + tb(offsets) + tb(permuted_to_token) + tb(expanded_to_permuted)});
  return do_moe_permute(topk_ids, num_experts, tile, offsets, permuted_to_token, expanded_to_permuted, workspace);
}

Status Backend::moe_gemm1_fp4(const Tensor& a, const Tensor& a_scales, float a_gs, const Tensor& w13,
                              const Tensor& w13_scales, const Tensor& w13_gs, const Tensor& offsets,
                              const Tensor& permuted_to_token, float out_gs, Tensor& out, Tensor& out_scales) {
  const char* op = "moe_gemm1_fp4";
  MOEPROF_RETURN_IF_ERROR(need_fp4_width(op, "a", a, "H"));
  const int64_t T = a.rows(), H = 2 * a.cols();
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "a_scales", a_scales, DType::kE4M3, T, H / 16));
  MOEPROF_RETURN_IF_ERROR(need_fp4_width(op, "out", out, "I"));
  const int64_t P = out.rows(), I = 2 * out.cols();
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "out_scales", out_scales, DType::kE4M3, P, I / 16));
  MOEPROF_RETURN_IF_ERROR(need_offsets(op, offsets));
  const int64_t E = offsets.numel() - 1;
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "permuted_to_token", permuted_to_token, DType::kI32, P));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "w13", w13, DType::kFP4x2, E * 2 * I, H / 2));
  MOEPROF_RETURN_IF_ERROR(need_aligned_rows(op, "a", a));
  MOEPROF_RETURN_IF_ERROR(need_aligned_rows(op, "w13", w13));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "w13_scales", w13_scales, DType::kE4M3, E * 2 * I, H / 16));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "w13_gs", w13_gs, DType::kF32, E));
  const double hit = moe_experts_ == E ? hit_share(moe_hit_experts_, moe_experts_) : 1.0;
  OpTimer timer(op_timer_target(), op, gemm1_cost(a, a_scales, w13, w13_scales, out, out_scales, moe_rows_, hit));
  return do_moe_gemm1_fp4(a, a_scales, a_gs, w13, w13_scales, w13_gs, offsets, permuted_to_token, out_gs, out,
                          out_scales);
}

Status Backend::moe_gemm2_fp4(const Tensor& h, const Tensor& h_scales, float h_gs, const Tensor& w2,
                              const Tensor& w2_scales, const Tensor& w2_gs, const Tensor& offsets,
                              const Tensor& permuted_to_token, Tensor& out) {
  const char* op = "moe_gemm2_fp4";
  MOEPROF_RETURN_IF_ERROR(need_fp4_width(op, "h", h, "I"));
  const int64_t P = h.rows(), I = 2 * h.cols();
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "h_scales", h_scales, DType::kE4M3, P, I / 16));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "out", out, DType::kBF16));
  if (out.rows() != P || out.cols() <= 0)
    return fail(op, "out", "have h's " + std::to_string(P) + " rows and at least one column" + got(out));
  const int64_t H = out.cols();
  MOEPROF_RETURN_IF_ERROR(need_offsets(op, offsets));
  const int64_t E = offsets.numel() - 1;
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "permuted_to_token", permuted_to_token, DType::kI32, P));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "w2", w2, DType::kFP4x2, E * H, I / 2));
  MOEPROF_RETURN_IF_ERROR(need_aligned_rows(op, "h", h));
  MOEPROF_RETURN_IF_ERROR(need_aligned_rows(op, "w2", w2));
  MOEPROF_RETURN_IF_ERROR(need_shape(op, "w2_scales", w2_scales, DType::kE4M3, E * H, I / 16));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "w2_gs", w2_gs, DType::kF32, E));
  const double hit = moe_experts_ == E ? hit_share(moe_hit_experts_, moe_experts_) : 1.0;
  OpTimer timer(op_timer_target(), op, gemm2_cost(h, h_scales, w2, w2_scales, out, moe_rows_, hit));
  return do_moe_gemm2_fp4(h, h_scales, h_gs, w2, w2_scales, w2_gs, offsets, permuted_to_token, out);
}

Status Backend::moe_combine(const Tensor& gemm2_out, const Tensor& expanded_to_permuted, const Tensor& topk_weights,
                            const Tensor& shared, Tensor& out) {
  const char* op = "moe_combine";
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "out", out, DType::kBF16));
  const int64_t T = out.rows(), H = out.cols();
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "gemm2_out", gemm2_out, DType::kBF16));
  if (gemm2_out.cols() != H)
    return fail(op, "gemm2_out", "have out's " + std::to_string(H) + " columns" + got(gemm2_out));
  MOEPROF_RETURN_IF_ERROR(need_dtype(op, "topk_weights", topk_weights, DType::kF32));
  const int64_t k = topk_weights.cols();
  // 32: the per-token weights and rows are held in registers by the CUDA kernel.
  if (topk_weights.rows() != T || k < 1 || k > 32)
    return fail(op, "topk_weights", "have out's " + std::to_string(T) + " rows and k in [1, 32] columns" +
                                        got(topk_weights));
  MOEPROF_RETURN_IF_ERROR(need_vector(op, "expanded_to_permuted", expanded_to_permuted, DType::kI32, T * k));
  if (shared.defined()) MOEPROF_RETURN_IF_ERROR(need_shape(op, "shared", shared, DType::kBF16, T, H));
  OpTimer timer(op_timer_target(), op, OpCost{0, static_cast<double>(expanded_to_permuted.numel()) * gemm2_out.cols() * dtype_size(DType::kBF16) + tb(expanded_to_permuted) + tb(topk_weights) + tb(shared) + tb(out)});
  return do_moe_combine(gemm2_out, expanded_to_permuted, topk_weights, shared, out);
}

}  // namespace moeprof
