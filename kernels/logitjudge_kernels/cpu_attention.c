/* Shared-prefix attention for CPU in fp32 (see cpu_attention.py for the contract and the reference).
 *
 * Each query row sees the shared prefix keys and its own row's suffix keys up to its position (and within the
 * sliding window). Work items are blocks of AMR query rows (12 on AVX-512, 6 else) of one (batch row, KV head),
 * taken in (position, query head) order so that the G query heads of a KV head share every key they load (GQA).
 * Per block:
 *   1. scores against the keys the block can see, from key panels packed once per call (NP keys x D, so one
 *      vector load feeds AMR fused multiply-adds): an AMR x 2 NP register tile, the loop over D innermost;
 *   2. an exact softmax per row (max, exp, zeroing what the row does not see, sum), no online rescaling: the
 *      block's scores stay in a per-thread scratch row of (prefix + suffix) keys;
 *   3. the weighted sum of values, AMR x 2 VW output columns per register tile, divided by the row's sum at the
 *      end.
 * Written with GCC vector extensions of the target's width (cpu_tiles.h: 16 floats on AVX-512, 8 on AVX2, 4 else).
 */
#include <omp.h>
#include <stdlib.h>

#include "cpu_tiles.h"

/* Rows per block: AMR. With AVX-512's 32 registers a tile holds 12 rows x 2 vectors (24 accumulators + 2 loads + 1
 * broadcast), so every key or value vector loaded from the packed panels feeds 12 FMAs instead of 6: 11% faster on
 * gemma-3-270m's calls (387 queries alone; 10 rows x 95 after 387 prefix keys: 202 -> 224, 221 -> 245 GFLOP/s,
 * interleaved, Intel Xeon AMX, 2 threads). AVX2's 16 registers hold 6 rows (MR, cpu_tiles.h). Each output
 * element still sums its terms in the same order, so the results are the same bits at any AMR. */
#if VW == 16
#define AMR 12
#else
#define AMR MR
#endif

/* sc[r][c] = scale * q_r . key(p0 * NP + c) for the AMR rows and the packed panels [p0, p1) */
static inline void qk_rows(const float *const *q, const float *panels, int64_t p0, int64_t p1, int64_t D,
                           float scale, float *sc, int64_t ld_sc) {
    int64_t p = p0;
    for (; p + 1 < p1; p += 2) {
        const float *A = panels + p * D * NP, *B = A + D * NP;
        vf c0[AMR], c1[AMR];
#pragma GCC unroll 12
        for (int i = 0; i < AMR; i++) c0[i] = c1[i] = (vf){0};
        for (int64_t d = 0; d < D; d++) {
            vf a = ld(A + d * NP), b = ld(B + d * NP);
#pragma GCC unroll 12
            for (int i = 0; i < AMR; i++) {
                float x = q[i][d];
                c0[i] += x * a;
                c1[i] += x * b;
            }
        }
        float *o = sc + (p - p0) * NP;
#pragma GCC unroll 12
        for (int i = 0; i < AMR; i++) {
            st(o + i * ld_sc, c0[i] * scale);
            st(o + i * ld_sc + NP, c1[i] * scale);
        }
    }
    if (p < p1) {
        const float *A = panels + p * D * NP;
        vf c0[AMR];
#pragma GCC unroll 12
        for (int i = 0; i < AMR; i++) c0[i] = (vf){0};
        for (int64_t d = 0; d < D; d++) {
            vf a = ld(A + d * NP);
#pragma GCC unroll 12
            for (int i = 0; i < AMR; i++) c0[i] += q[i][d] * a;
        }
        float *o = sc + (p - p0) * NP;
#pragma GCC unroll 12
        for (int i = 0; i < AMR; i++) st(o + i * ld_sc, c0[i] * scale);
    }
}

/* acc[r][0..D) += sum over c in [c0, c1) of w[r][c] * v[c] (v rows D floats apart); D a multiple of 2 VW:
 * AMR rows x 2 vectors of output columns per register tile */
static void pv_tile(const float *w, int64_t ld_w, int64_t c0, int64_t c1, const float *v, int64_t D, float *acc) {
    for (int64_t e = 0; e < D; e += 2 * VW) {
        float *a = acc + e;
        vf x0[AMR], x1[AMR];
#pragma GCC unroll 12
        for (int i = 0; i < AMR; i++) {
            x0[i] = ld(a + i * D);
            x1[i] = ld(a + i * D + VW);
        }
        for (int64_t c = c0; c < c1; c++) {
            vf x = ld(v + c * D + e), y = ld(v + c * D + e + VW);
#pragma GCC unroll 12
            for (int i = 0; i < AMR; i++) {
                float wi = w[i * ld_w + c];
                x0[i] += wi * x;
                x1[i] += wi * y;
            }
        }
#pragma GCC unroll 12
        for (int i = 0; i < AMR; i++) {
            st(a + i * D, x0[i]);
            st(a + i * D + VW, x1[i]);
        }
    }
}

/* q (B, Hkv, G, S, D); k_pre, v_pre (Hkv, L, D); k_suf, v_suf (B, Hkv, S, D); out (B, S, Hkv * G, D); all
 * contiguous. Query s of a row sits at absolute position L + s; window 0 = no sliding window. D % 32 == 0.
 * Only the queries at suffix positions [s0, s1) are computed (their out rows written), so a long call can be
 * cut into several (the host wrapper does, to stay interruptible); each query's result does not depend on the cut.
 * sinks: NULL, or Hkv * G per-query-head sink logits (GPT-OSS): one more term exp(sink - m) in each row's
 * softmax denominator (a key whose value is zero), counted once over prefix and suffix keys together.
 * Returns 0, or 1 when its scratch memory could not be allocated (out is then not written). */
int prefix_attention_f32(const float *q, const float *k_pre, const float *v_pre, const float *k_suf,
                          const float *v_suf, float *out, const float *sinks, int64_t B, int64_t Hkv, int64_t G,
                          int64_t S, int64_t L, int64_t D, int64_t window, float scale, int64_t s0, int64_t s1,
                          int threads) {
    int64_t Lp = (L + NP - 1) / NP, Sp = (S + NP - 1) / NP;
    int64_t rows = G * (s1 - s0), blocks = (rows + AMR - 1) / AMR, ld_sc = (Lp + Sp) * NP;
    float *pre_panels = malloc(sizeof(float) * (Hkv * Lp * NP * D + 1));
    float *suf_panels = malloc(sizeof(float) * (B * Hkv * Sp * NP * D + 1));
    float *scratch = malloc(sizeof(float) * threads * AMR * (ld_sc + D));
    if (!pre_panels || !suf_panels || !scratch) {
        free(pre_panels);
        free(suf_panels);
        free(scratch);
        return 1;
    }
#pragma omp parallel num_threads(threads)
    {
        float *sc = scratch + omp_get_thread_num() * AMR * (ld_sc + D), *acc = sc + AMR * ld_sc;
#pragma omp for schedule(static)
        for (int64_t h = 0; h < Hkv; h++) pack_keys(k_pre + h * L * D, L, D, pre_panels + h * Lp * NP * D);
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * Hkv; bh++) /* keys past s1 are seen by no query of this call */
            pack_keys(k_suf + bh * S * D, s1, D, suf_panels + bh * Sp * NP * D);
#pragma omp for schedule(dynamic, 4)
        for (int64_t item = 0; item < B * Hkv * blocks; item++) {
            int64_t bh = item / blocks, b = bh / Hkv, h = bh % Hkv, r0 = (item % blocks) * AMR;
            int64_t first_row = s0 * G; /* rows are (position, head) pairs, position-major */
            int64_t n_rows = min64(AMR, rows - r0), pos[AMR], head[AMR];
            const float *qr[AMR];
            float inv_sum[AMR];
            for (int64_t i = 0; i < AMR; i++) {  /* short blocks repeat their last row; it is not written */
                int64_t r = first_row + r0 + min64(i, n_rows - 1);
                pos[i] = r / G;
                head[i] = r % G;
                qr[i] = q + ((bh * G + head[i]) * S + pos[i]) * D;
            }
            /* keys any row of the block sees: prefix [p_lo, L), suffix [t_lo, last position] */
            int64_t first = pos[0], last = pos[AMR - 1];
            int64_t p_lo = window ? min64(max64(L + first - window + 1, 0), L) : 0;
            int64_t t_lo = window ? max64(first - window + 1, 0) : 0;
            int64_t pp0 = p_lo / NP, tp0 = t_lo / NP, tp1 = last / NP + 1;
            int64_t n_pre = (Lp - pp0) * NP, n_suf = (tp1 - tp0) * NP; /* score columns of each part */
            float *sc_pre = sc, *sc_suf = sc + n_pre;
            if (n_pre) qk_rows(qr, pre_panels + h * Lp * NP * D, pp0, Lp, D, scale, sc_pre, ld_sc);
            qk_rows(qr, suf_panels + bh * Sp * NP * D, tp0, tp1, D, scale, sc_suf, ld_sc);
            for (int64_t i = 0; i < AMR; i++) {
                int64_t s = pos[i];
                int64_t j_lo = window ? max64(L + s - window + 1, 0) : 0; /* this row's first prefix key */
                int64_t u_lo = window ? max64(s - window + 1, 0) : 0;     /* and first suffix key */
                float *rp = sc_pre + i * ld_sc, *rs = sc_suf + i * ld_sc;
                float m = row_max(rp, j_lo - pp0 * NP, L - pp0 * NP, -INFINITY);
                m = row_max(rs, u_lo - tp0 * NP, s + 1 - tp0 * NP, m);
                float sink = sinks ? sinks[h * G + head[i]] : -INFINITY;
                m = fmaxf(m, sink);
                float sum = exp_keep(rp, n_pre, m, j_lo - pp0 * NP, L - pp0 * NP);
                sum += exp_keep(rs, n_suf, m, u_lo - tp0 * NP, s + 1 - tp0 * NP);
                if (sinks) sum += expf(sink - m);
                inv_sum[i] = 1.0f / sum; /* > 0: every query sees at least its own key */
            }
            memset(acc, 0, sizeof(float) * AMR * D);
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
