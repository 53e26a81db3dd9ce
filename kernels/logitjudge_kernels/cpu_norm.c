/* Fused fp32 row kernels for the native step functions on CPU (see cpu_norm.py): Gemma-3's conventions (a norm
 * of each block's output before the residual add, q/k norms) and Llama's (the residual add, then the next norm;
 * RoPE without q/k norms).
 *
 * Each row of a (rows, d) matrix is independent and small (d = 640 for Gemma-3-270M, one head = 256), so one
 * pass that keeps the row in L1 replaces the 4-6 passes over memory of the composed torch ops (pow, mean,
 * rsqrt, mul, mul; cat/neg/mul/add for RoPE). Rows are split across OpenMP threads (the libgomp that torch has
 * already loaded: same SONAME, so one thread pool). The arithmetic follows the PyTorch references in
 * cpu_norm.py op by op; only the order of the sum of squares differs (vectorised partial sums).
 */
#include <math.h>
#include <stdint.h>

#include "cpu_tiles.h" /* vf, vexp: the gated MLP's activation */

static inline float row_inv_rms(const float *x, int64_t d, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < d; j++) ss += x[j] * x[j];
    return 1.0f / sqrtf(ss / (float)d + eps);
}

/* out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w; x rows at stride x_stride, out contiguous (rows, d). */
void rms_norm_f32(const float *x, int64_t x_stride, const float *w, float *out, int64_t rows, int64_t d,
                  float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * x_stride;
        float *o = out + r * d;
        float inv = row_inv_rms(xr, d, eps);
#pragma omp simd
        for (int64_t j = 0; j < d; j++) o[j] = (xr[j] * inv) * w[j];
    }
}

/* The residual step between Gemma-3 blocks:
 *   x_out = x + rms_norm(y) * w_y           (post-attention / post-feed-forward norm, then the residual add)
 *   h_out = rms_norm(x_out) * w_next        (the next block's input norm)
 * x, y, x_out, h_out: contiguous (rows, d). */
void residual_rms_norm_f32(const float *x, const float *y, const float *w_y, const float *w_next, float *x_out,
                           float *h_out, int64_t rows, int64_t d, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *yr = y + r * d;
        float *xo = x_out + r * d, *ho = h_out + r * d;
        float inv_y = row_inv_rms(yr, d, eps);
#pragma omp simd
        for (int64_t j = 0; j < d; j++) xo[j] = xr[j] + (yr[j] * inv_y) * w_y[j];
        float inv_x = row_inv_rms(xo, d, eps);
#pragma omp simd
        for (int64_t j = 0; j < d; j++) ho[j] = (xo[j] * inv_x) * w_next[j];
    }
}

/* The residual step between Llama-style blocks (no norm of the block's output):
 *   x_out = x + y,   h_out = rms_norm(x_out) * w_next.   x, y, x_out, h_out: contiguous (rows, d). */
void add_rms_norm_f32(const float *x, const float *y, const float *w_next, float *x_out, float *h_out,
                      int64_t rows, int64_t d, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *yr = y + r * d;
        float *xo = x_out + r * d, *ho = h_out + r * d;
#pragma omp simd
        for (int64_t j = 0; j < d; j++) xo[j] = xr[j] + yr[j];
        float inv_x = row_inv_rms(xo, d, eps);
#pragma omp simd
        for (int64_t j = 0; j < d; j++) ho[j] = (xo[j] * inv_x) * w_next[j];
    }
}

/* One head vector rotated (RoPE, half-split as transformers' rotate_half), no norm. */
static inline void rope_head(const float *t, const float *cos, const float *sin, float *out, int64_t D) {
    int64_t half = D / 2;
#pragma omp simd
    for (int64_t j = 0; j < half; j++) out[j] = t[j] * cos[j] + (-t[j + half]) * sin[j];
#pragma omp simd
    for (int64_t j = half; j < D; j++) out[j] = t[j] * cos[j] + t[j - half] * sin[j];
}

/* One head vector: rms-normed (weight w), then rotated (RoPE, half-split as transformers' rotate_half):
 *   out = n * cos + cat(-n[half:], n[:half]) * sin,   n = head * rsqrt(mean(head^2) + eps) * w. */
static inline void norm_rope_head(const float *head, const float *w, const float *cos, const float *sin,
                                  float *out, int64_t D, float eps, float *tmp) {
    float inv = row_inv_rms(head, D, eps);
#pragma omp simd
    for (int64_t j = 0; j < D; j++) tmp[j] = (head[j] * inv) * w[j];
    rope_head(tmp, cos, sin, out, D);
}

/* Split a (B, S, Hq + 2 Hkv, D) q/k/v projection (rows at stride qkv_stride) into the attention layout:
 *   q (B, Hq, S, D) = rope(rms_norm(q) * q_w),  k (B, Hkv, S, D) = rope(rms_norm(k) * k_w),  v (B, Hkv, S, D).
 * cos, sin: contiguous (B, S, D). D <= 1024. */
void qk_norm_rope_f32(const float *qkv, int64_t qkv_stride, const float *q_w, const float *k_w, const float *cos,
                      const float *sin, float *q, float *k, float *v, int64_t B, int64_t S, int64_t Hq,
                      int64_t Hkv, int64_t D, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < B * S; r++) {
        float tmp[1024];
        int64_t b = r / S, s = r % S;
        const float *row = qkv + r * qkv_stride;
        const float *c = cos + r * D, *sn = sin + r * D;
        for (int64_t h = 0; h < Hq; h++)
            norm_rope_head(row + h * D, q_w, c, sn, q + ((b * Hq + h) * S + s) * D, D, eps, tmp);
        for (int64_t h = 0; h < Hkv; h++) {
            norm_rope_head(row + (Hq + h) * D, k_w, c, sn, k + ((b * Hkv + h) * S + s) * D, D, eps, tmp);
            const float *vh = row + (Hq + Hkv + h) * D;
            float *vo = v + ((b * Hkv + h) * S + s) * D;
#pragma omp simd
            for (int64_t j = 0; j < D; j++) vo[j] = vh[j];
        }
    }
}

/* qk_norm_rope_f32 without the q/k norms (Llama, Qwen2, Mistral, Phi-3): q and k rotated, v copied, each written
 * in the attention layout (B, H, S, D). No head-size limit (no scratch). */
void qk_rope_f32(const float *qkv, int64_t qkv_stride, const float *cos, const float *sin, float *q, float *k,
                 float *v, int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < B * S; r++) {
        int64_t b = r / S, s = r % S;
        const float *row = qkv + r * qkv_stride;
        const float *c = cos + r * D, *sn = sin + r * D;
        for (int64_t h = 0; h < Hq; h++) rope_head(row + h * D, c, sn, q + ((b * Hq + h) * S + s) * D, D);
        for (int64_t h = 0; h < Hkv; h++) {
            rope_head(row + (Hq + h) * D, c, sn, k + ((b * Hkv + h) * S + s) * D, D);
            const float *vh = row + (Hq + Hkv + h) * D;
            float *vo = v + ((b * Hkv + h) * S + s) * D;
#pragma omp simd
            for (int64_t j = 0; j < D; j++) vo[j] = vh[j];
        }
    }
}

/* The gated MLP's input from its fused gate/up projection: out[r] = act(gu[r, :I]) * gu[r, I:2I], gu rows at
 * stride gu_stride, out contiguous (rows, I). act 0: GELU-tanh, 1: SiLU, both x * sigmoid(z), with z = x (SiLU)
 * or z = 2 sqrt(2/pi) (x + 0.044715 x^3) (GELU-tanh, since 0.5 (1 + tanh(y)) = sigmoid(2y)), the sigmoid from
 * exp(-|z|) (vexp, which takes x <= 0), so no exponent overflows and no 1 + tanh cancels. A row is computed by
 * one thread, vector by vector, its tail as a zero-padded vector through the same code: a value's bits do not
 * depend on the thread count (torch's GELU splits the flat range over the threads and computes each share's
 * tail with its scalar function, so they do). */
static inline vf vact(vf x, int act) {
    vf z = act == 0 ? x * (1.5957691216057308f + 0.0713548162726f * (x * x)) : x;
    vi neg = z < 0.0f;
    vf e = vexp(vsel(neg, z, -z)); /* exp(-|z|) */
    return x * vsel(neg, e / (1.0f + e), 1.0f / (1.0f + e));
}

void act_mul_f32(const float *gu, int64_t gu_stride, float *out, int64_t rows, int64_t inter, int act,
                 int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gu + r * gu_stride, *u = g + inter;
        float *o = out + r * inter;
        int64_t j = 0;
        for (; j + VW <= inter; j += VW) st(o + j, vact(ld(g + j), act) * ld(u + j));
        if (j < inter) {
            float tg[VW] = {0}, tu[VW] = {0}, to[VW];
            memcpy(tg, g + j, (size_t)(inter - j) * sizeof(float));
            memcpy(tu, u + j, (size_t)(inter - j) * sizeof(float));
            st(to, vact(ld(tg), act) * ld(tu));
            memcpy(o + j, to, (size_t)(inter - j) * sizeof(float));
        }
    }
}
