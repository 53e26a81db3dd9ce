/* Shared-prefix attention for CPU in fp32 (see cpu_attention.py for the contract and the reference).
 *
 * Each query row sees the shared prefix keys and its own row's suffix keys up to its position (and within the
 * sliding window). Work items are blocks of MR query rows of one (batch row, KV head), taken in (position,
 * query head) order so that the G query heads of a KV head share every key they load (GQA). Per block:
 *   1. scores against the keys the block can see, from key panels packed once per call (NP keys x D, so one
 *      vector load feeds MR fused multiply-adds): an MR x 32 register tile, the loop over D innermost;
 *   2. an exact softmax per row (max, exp, zeroing what the row does not see, sum), no online rescaling: the
 *      block's scores stay in a per-thread scratch row of (prefix + suffix) keys;
 *   3. the weighted sum of values, MR x 32 output columns per register tile, divided by the row's sum at the end.
 * Written with GCC vector extensions (16 floats), so the same source builds for AVX-512 or narrower units.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

#define MR 6  /* query rows per register tile */
#define NP 16 /* keys per packed panel (one vector) */

static inline v16 ld(const float *p) { return *(const v16u *)p; }
static inline void st(float *p, v16 v) { *(v16u *)p = v; }
static inline v16 splat(float x) { return (v16){0} + x; }
static inline v16 vsel(vi16 m, v16 a, v16 b) { return (v16)(((vi16)a & m) | ((vi16)b & ~m)); }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* exp(x) for x <= 0 (scores minus their row max); below -87.3 -> 0. Cephes' expf polynomial, ~1 ulp. */
static inline v16 vexp(v16 x) {
    const v16 lo = splat(-87.3f);
    vi16 under = x < lo;
    x = vsel(under, lo, x);
    vi16 n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, vi16); /* round to nearest, x <= 0 */
    v16 fx = __builtin_convertvector(n, v16);
    v16 r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
    v16 y = splat(1.9875691500E-4f);
    y = y * r + 1.3981999507E-3f;
    y = y * r + 8.3334519073E-3f;
    y = y * r + 4.1665795894E-2f;
    y = y * r + 1.6666665459E-1f;
    y = y * r + 5.0000001201E-1f;
    y = y * (r * r) + r + 1.0f;
    return vsel(under, splat(0.0f), y * (v16)((n + 127) << 23));
}

/* keys k[0..n) (rows D floats apart) -> panels of NP keys: panel p holds P[d * NP + j] = k[p * NP + j][d] */
static void pack_keys(const float *k, int64_t n, int64_t D, float *dst) {
    for (int64_t p = 0; p < (n + NP - 1) / NP; p++) {
        float *P = dst + p * D * NP;
        for (int64_t j = 0; j < NP; j++) {
            int64_t key = p * NP + j;
            for (int64_t d = 0; d < D; d++) P[d * NP + j] = key < n ? k[key * D + d] : 0.0f;
        }
    }
}

/* sc[r][c] = scale * q_r . key(p0 * NP + c) for the MR rows and the packed panels [p0, p1) */
static void qk_tile(const float *const *q, const float *panels, int64_t p0, int64_t p1, int64_t D, float scale,
                    float *sc, int64_t ld_sc) {
    int64_t p = p0;
    for (; p + 1 < p1; p += 2) {
        const float *A = panels + p * D * NP, *B = A + D * NP;
        v16 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
        v16 c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
        for (int64_t d = 0; d < D; d++) {
            v16 a = ld(A + d * NP), b = ld(B + d * NP);
            float q0 = q[0][d], q1 = q[1][d], q2 = q[2][d], q3 = q[3][d], q4 = q[4][d], q5 = q[5][d];
            c00 += q0 * a; c01 += q0 * b; c10 += q1 * a; c11 += q1 * b; c20 += q2 * a; c21 += q2 * b;
            c30 += q3 * a; c31 += q3 * b; c40 += q4 * a; c41 += q4 * b; c50 += q5 * a; c51 += q5 * b;
        }
        float *o = sc + (p - p0) * NP;
        st(o, c00 * scale); st(o + NP, c01 * scale); o += ld_sc;
        st(o, c10 * scale); st(o + NP, c11 * scale); o += ld_sc;
        st(o, c20 * scale); st(o + NP, c21 * scale); o += ld_sc;
        st(o, c30 * scale); st(o + NP, c31 * scale); o += ld_sc;
        st(o, c40 * scale); st(o + NP, c41 * scale); o += ld_sc;
        st(o, c50 * scale); st(o + NP, c51 * scale);
    }
    if (p < p1) {
        const float *A = panels + p * D * NP;
        v16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0};
        for (int64_t d = 0; d < D; d++) {
            v16 a = ld(A + d * NP);
            c0 += q[0][d] * a; c1 += q[1][d] * a; c2 += q[2][d] * a;
            c3 += q[3][d] * a; c4 += q[4][d] * a; c5 += q[5][d] * a;
        }
        float *o = sc + (p - p0) * NP;
        st(o, c0 * scale); st(o + ld_sc, c1 * scale); st(o + 2 * ld_sc, c2 * scale);
        st(o + 3 * ld_sc, c3 * scale); st(o + 4 * ld_sc, c4 * scale); st(o + 5 * ld_sc, c5 * scale);
    }
}

/* acc[r][0..D) += sum over c in [c0, c1) of w[r][c] * v[c] (v rows D floats apart); D a multiple of 32 */
static void pv_tile(const float *w, int64_t ld_w, int64_t c0, int64_t c1, const float *v, int64_t D, float *acc) {
    for (int64_t e = 0; e < D; e += 32) {
        float *a = acc + e;
        v16 a00 = ld(a), a01 = ld(a + 16), a10 = ld(a + D), a11 = ld(a + D + 16);
        v16 a20 = ld(a + 2 * D), a21 = ld(a + 2 * D + 16), a30 = ld(a + 3 * D), a31 = ld(a + 3 * D + 16);
        v16 a40 = ld(a + 4 * D), a41 = ld(a + 4 * D + 16), a50 = ld(a + 5 * D), a51 = ld(a + 5 * D + 16);
        for (int64_t c = c0; c < c1; c++) {
            v16 x = ld(v + c * D + e), y = ld(v + c * D + e + 16);
            float w0 = w[c], w1 = w[ld_w + c], w2 = w[2 * ld_w + c];
            float w3 = w[3 * ld_w + c], w4 = w[4 * ld_w + c], w5 = w[5 * ld_w + c];
            a00 += w0 * x; a01 += w0 * y; a10 += w1 * x; a11 += w1 * y; a20 += w2 * x; a21 += w2 * y;
            a30 += w3 * x; a31 += w3 * y; a40 += w4 * x; a41 += w4 * y; a50 += w5 * x; a51 += w5 * y;
        }
        st(a, a00); st(a + 16, a01); st(a + D, a10); st(a + D + 16, a11);
        st(a + 2 * D, a20); st(a + 2 * D + 16, a21); st(a + 3 * D, a30); st(a + 3 * D + 16, a31);
        st(a + 4 * D, a40); st(a + 4 * D + 16, a41); st(a + 5 * D, a50); st(a + 5 * D + 16, a51);
    }
}

/* exp(row - m) over n columns (a multiple of NP), then zero columns outside [keep0, keep1); returns the sum */
static float exp_keep(float *row, int64_t n, float m, int64_t keep0, int64_t keep1) {
    for (int64_t c = 0; c < n; c += NP) st(row + c, vexp(ld(row + c) - m));
    keep0 = min64(max64(keep0, 0), n);
    keep1 = min64(max64(keep1, keep0), n);
    memset(row, 0, sizeof(float) * keep0);
    memset(row + keep1, 0, sizeof(float) * (n - keep1));
    v16 s = {0};
    for (int64_t c = 0; c < n; c += NP) s += ld(row + c);
    float sum = 0.0f;
    for (int k = 0; k < NP; k++) sum += s[k];
    return sum;
}

static float row_max(const float *row, int64_t c0, int64_t c1, float m) {
#pragma omp simd reduction(max : m)
    for (int64_t c = c0; c < c1; c++) m = row[c] > m ? row[c] : m;
    return m;
}

/* q (B, Hkv, G, S, D); k_pre, v_pre (Hkv, L, D); k_suf, v_suf (B, Hkv, S, D); out (B, S, Hkv * G, D); all
 * contiguous. Query s of a row sits at absolute position L + s; window 0 = no sliding window. D % 32 == 0.
 * Returns 0, or 1 when its scratch memory could not be allocated (out is then not written). */
int prefix_attention_f32(const float *q, const float *k_pre, const float *v_pre, const float *k_suf,
                          const float *v_suf, float *out, int64_t B, int64_t Hkv, int64_t G, int64_t S, int64_t L,
                          int64_t D, int64_t window, float scale, int threads) {
    int64_t Lp = (L + NP - 1) / NP, Sp = (S + NP - 1) / NP;
    int64_t rows = G * S, blocks = (rows + MR - 1) / MR, ld_sc = (Lp + Sp) * NP;
    float *pre_panels = malloc(sizeof(float) * (Hkv * Lp * NP * D + 1));
    float *suf_panels = malloc(sizeof(float) * (B * Hkv * Sp * NP * D + 1));
    float *scratch = malloc(sizeof(float) * threads * MR * (ld_sc + D));
    if (!pre_panels || !suf_panels || !scratch) {
        free(pre_panels);
        free(suf_panels);
        free(scratch);
        return 1;
    }
#pragma omp parallel num_threads(threads)
    {
        float *sc = scratch + omp_get_thread_num() * MR * (ld_sc + D), *acc = sc + MR * ld_sc;
#pragma omp for schedule(static)
        for (int64_t h = 0; h < Hkv; h++) pack_keys(k_pre + h * L * D, L, D, pre_panels + h * Lp * NP * D);
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * Hkv; bh++) pack_keys(k_suf + bh * S * D, S, D, suf_panels + bh * Sp * NP * D);
#pragma omp for schedule(dynamic, 4)
        for (int64_t item = 0; item < B * Hkv * blocks; item++) {
            int64_t bh = item / blocks, b = bh / Hkv, h = bh % Hkv, r0 = (item % blocks) * MR;
            int64_t n_rows = min64(MR, rows - r0), pos[MR], head[MR];
            const float *qr[MR];
            float inv_sum[MR];
            for (int64_t i = 0; i < MR; i++) {  /* short blocks repeat their last row; it is not written */
                int64_t r = r0 + min64(i, n_rows - 1);
                pos[i] = r / G;
                head[i] = r % G;
                qr[i] = q + ((bh * G + head[i]) * S + pos[i]) * D;
            }
            /* keys any row of the block sees: prefix [p_lo, L), suffix [t_lo, last position] */
            int64_t first = pos[0], last = pos[MR - 1];
            int64_t p_lo = window ? min64(max64(L + first - window + 1, 0), L) : 0;
            int64_t t_lo = window ? max64(first - window + 1, 0) : 0;
            int64_t pp0 = p_lo / NP, tp0 = t_lo / NP, tp1 = last / NP + 1;
            int64_t n_pre = (Lp - pp0) * NP, n_suf = (tp1 - tp0) * NP; /* score columns of each part */
            float *sc_pre = sc, *sc_suf = sc + n_pre;
            if (n_pre) qk_tile(qr, pre_panels + h * Lp * NP * D, pp0, Lp, D, scale, sc_pre, ld_sc);
            qk_tile(qr, suf_panels + bh * Sp * NP * D, tp0, tp1, D, scale, sc_suf, ld_sc);
            for (int64_t i = 0; i < MR; i++) {
                int64_t s = pos[i];
                int64_t j_lo = window ? max64(L + s - window + 1, 0) : 0; /* this row's first prefix key */
                int64_t u_lo = window ? max64(s - window + 1, 0) : 0;     /* and first suffix key */
                float *rp = sc_pre + i * ld_sc, *rs = sc_suf + i * ld_sc;
                float m = row_max(rp, j_lo - pp0 * NP, L - pp0 * NP, -INFINITY);
                m = row_max(rs, u_lo - tp0 * NP, s + 1 - tp0 * NP, m);
                float sum = exp_keep(rp, n_pre, m, j_lo - pp0 * NP, L - pp0 * NP);
                sum += exp_keep(rs, n_suf, m, u_lo - tp0 * NP, s + 1 - tp0 * NP);
                inv_sum[i] = 1.0f / sum; /* > 0: every query sees at least its own key */
            }
            memset(acc, 0, sizeof(float) * MR * D);
            if (L > p_lo)
                pv_tile(sc_pre, ld_sc, p_lo - pp0 * NP, L - pp0 * NP, v_pre + (h * L + pp0 * NP) * D, D, acc);
            pv_tile(sc_suf, ld_sc, t_lo - tp0 * NP, last + 1 - tp0 * NP, v_suf + (bh * S + tp0 * NP) * D, D, acc);
            for (int64_t i = 0; i < n_rows; i++) {
                float *o = out + ((b * S + pos[i]) * Hkv * G + h * G + head[i]) * D, inv = inv_sum[i];
                const float *a = acc + i * D;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) o[d] = a[d] * inv;
            }
        }
    }
    free(pre_panels);
    free(suf_panels);
    free(scratch);
    return 0;
}
