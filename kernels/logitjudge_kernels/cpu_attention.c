/* Shared-prefix attention for CPU in fp32 (see cpu_attention.py for the contract and the reference).
 *
 * Each query row sees the shared prefix keys and its own row's suffix keys up to its position (and within the
 * sliding window). Work items are blocks of MR query rows of one (batch row, KV head), taken in (position,
 * query head) order so that the G query heads of a KV head share every key they load (GQA). Per block:
 *   1. scores against the keys the block can see, from key panels packed once per call (NP keys x D, so one
 *      vector load feeds MR fused multiply-adds): an MR x 2 NP register tile, the loop over D innermost;
 *   2. an exact softmax per row (max, exp, zeroing what the row does not see, sum), no online rescaling: the
 *      block's scores stay in a per-thread scratch row of (prefix + suffix) keys;
 *   3. the weighted sum of values, MR x 2 VW output columns per register tile, divided by the row's sum at the end.
 * Written with GCC vector extensions of the target's width (cpu_tiles.h: 16 floats on AVX-512, 8 on AVX2, 4 else).
 */
#include <omp.h>
#include <stdlib.h>

#include "cpu_tiles.h"

/* acc[r][0..D) += sum over c in [c0, c1) of w[r][c] * v[c] (v rows D floats apart); D a multiple of 2 VW:
 * MR rows x 2 vectors of output columns per register tile */
static void pv_tile(const float *w, int64_t ld_w, int64_t c0, int64_t c1, const float *v, int64_t D, float *acc) {
    for (int64_t e = 0; e < D; e += 2 * VW) {
        float *a = acc + e;
        vf a00 = ld(a), a01 = ld(a + VW), a10 = ld(a + D), a11 = ld(a + D + VW);
        vf a20 = ld(a + 2 * D), a21 = ld(a + 2 * D + VW), a30 = ld(a + 3 * D), a31 = ld(a + 3 * D + VW);
        vf a40 = ld(a + 4 * D), a41 = ld(a + 4 * D + VW), a50 = ld(a + 5 * D), a51 = ld(a + 5 * D + VW);
        for (int64_t c = c0; c < c1; c++) {
            vf x = ld(v + c * D + e), y = ld(v + c * D + e + VW);
            float w0 = w[c], w1 = w[ld_w + c], w2 = w[2 * ld_w + c];
            float w3 = w[3 * ld_w + c], w4 = w[4 * ld_w + c], w5 = w[5 * ld_w + c];
            a00 += w0 * x; a01 += w0 * y; a10 += w1 * x; a11 += w1 * y; a20 += w2 * x; a21 += w2 * y;
            a30 += w3 * x; a31 += w3 * y; a40 += w4 * x; a41 += w4 * y; a50 += w5 * x; a51 += w5 * y;
        }
        st(a, a00); st(a + VW, a01); st(a + D, a10); st(a + D + VW, a11);
        st(a + 2 * D, a20); st(a + 2 * D + VW, a21); st(a + 3 * D, a30); st(a + 3 * D + VW, a31);
        st(a + 4 * D, a40); st(a + 4 * D + VW, a41); st(a + 5 * D, a50); st(a + 5 * D + VW, a51);
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
    int64_t rows = G * (s1 - s0), blocks = (rows + MR - 1) / MR, ld_sc = (Lp + Sp) * NP;
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
        for (int64_t bh = 0; bh < B * Hkv; bh++) /* keys past s1 are seen by no query of this call */
            pack_keys(k_suf + bh * S * D, s1, D, suf_panels + bh * Sp * NP * D);
#pragma omp for schedule(dynamic, 4)
        for (int64_t item = 0; item < B * Hkv * blocks; item++) {
            int64_t bh = item / blocks, b = bh / Hkv, h = bh % Hkv, r0 = (item % blocks) * MR;
            int64_t first_row = s0 * G; /* rows are (position, head) pairs, position-major */
            int64_t n_rows = min64(MR, rows - r0), pos[MR], head[MR];
            const float *qr[MR];
            float inv_sum[MR];
            for (int64_t i = 0; i < MR; i++) {  /* short blocks repeat their last row; it is not written */
                int64_t r = first_row + r0 + min64(i, n_rows - 1);
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
                float sink = sinks ? sinks[h * G + head[i]] : -INFINITY;
                m = fmaxf(m, sink);
                float sum = exp_keep(rp, n_pre, m, j_lo - pp0 * NP, L - pp0 * NP);
                sum += exp_keep(rs, n_suf, m, u_lo - tp0 * NP, s + 1 - tp0 * NP);
                if (sinks) sum += expf(sink - m);
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
