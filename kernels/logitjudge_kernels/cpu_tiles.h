/* Vector helpers and tiles shared by the CPU C kernels (cpu_attention.c, cpu_readout.c), written with GCC
 * vector extensions so one source builds for every target. The vector width is chosen at compile time from the
 * target ISA, so a register tile always fits the register file:
 *   AVX-512 (32 x 512-bit registers): 16 floats a vector;
 *   AVX2 / AVX (16 x 256-bit): 8 floats;
 *   anything else (NEON's 32 x 128-bit, SSE, or plain C the compiler vectorises): 4 floats.
 * The register tile is MR = 6 query rows x 2 vectors: 12 accumulators + 2 loads + 1 broadcast = 15 registers,
 * which fits AVX2's 16 (a 16-float vector there is split into two registers and the tile spills: the AVX-512
 * tile built for AVX2 ran the read-out 5-18x slower than MKL, issue 21). Part of each kernel's build key
 * (kernels/_cbuild.py hashes the headers beside a source). */
#ifndef LOGITJUDGE_CPU_TILES_H
#define LOGITJUDGE_CPU_TILES_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif

typedef float vf __attribute__((vector_size(VW * 4)));  /* one register: VW floats */
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4)));

#define MR 6  /* query rows per register tile */
#define NP VW /* keys per packed panel (one vector) */

/* the target's vector width in floats, for tests and logs (weak: every kernel source includes this header) */
__attribute__((weak)) int tiles_vector_width(void) { return VW; }

static inline vf ld(const float *p) { return *(const vfu *)p; }
static inline void st(float *p, vf v) { *(vfu *)p = v; }
static inline vf splat(float x) { return (vf){0} + x; }
static inline vf vsel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* exp(x) for x <= 0 (scores minus their row max); below -87.3 -> 0. Cephes' expf polynomial, ~1 ulp. */
static inline vf vexp(vf x) {
    const vf lo = splat(-87.3f);
    vi under = x < lo;
    x = vsel(under, lo, x);
    vi n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, vi); /* round to nearest, x <= 0 */
    vf fx = __builtin_convertvector(n, vf);
    vf r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
    vf y = splat(1.9875691500E-4f);
    y = y * r + 1.3981999507E-3f;
    y = y * r + 8.3334519073E-3f;
    y = y * r + 4.1665795894E-2f;
    y = y * r + 1.6666665459E-1f;
    y = y * r + 5.0000001201E-1f;
    y = y * (r * r) + r + 1.0f;
    return vsel(under, splat(0.0f), y * (vf)((n + 127) << 23));
}

/* In-register transpose of VW vectors (r[i][j] -> r[j][i]) in log2(VW) stages; stage b exchanges, between
 * rows i and i + b, the elements whose column has bit b set: new r[i][j] = r[i ^ b][j ^ b] where bits b of i and
 * j differ. Each stage is VW two-source shuffles with constant masks (vpermt2ps on AVX-512). */
#if VW == 16
static const vi T_LO[4] = {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                           {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                           {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                           {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}};
static const vi T_HI[4] = {{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
                           {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
                           {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
                           {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}};
#define T_STAGES 4
#elif VW == 8
static const vi T_LO[3] = {{0, 1, 2, 3, 8, 9, 10, 11}, {0, 1, 8, 9, 4, 5, 12, 13}, {0, 8, 2, 10, 4, 12, 6, 14}};
static const vi T_HI[3] = {{4, 5, 6, 7, 12, 13, 14, 15}, {2, 3, 10, 11, 6, 7, 14, 15}, {1, 9, 3, 11, 5, 13, 7, 15}};
#define T_STAGES 3
#else
static const vi T_LO[2] = {{0, 1, 4, 5}, {0, 4, 2, 6}};
static const vi T_HI[2] = {{2, 3, 6, 7}, {1, 5, 3, 7}};
#define T_STAGES 2
#endif

static inline void transpose_tile(vf *r) {
#pragma GCC unroll 4
    for (int s = 0; s < T_STAGES; s++) {
        int b = VW >> (s + 1);
#pragma GCC unroll 16
        for (int i = 0; i < VW; i++) {
            if (i & b) continue;
            vf x = r[i], y = r[i + b];
            r[i] = __builtin_shuffle(x, y, T_LO[s]);
            r[i + b] = __builtin_shuffle(x, y, T_HI[s]);
        }
    }
}

/* keys k[0..n) (rows D floats apart) -> panels of NP keys: panel p holds P[d * NP + j] = k[p * NP + j][d].
 * Full panels move VW x VW tiles through registers (the read-out packs its whole vocabulary every call: the
 * element-by-element copy took half its time); the last, partial panel and a tail of D % VW go one by one. */
static inline void pack_keys(const float *k, int64_t n, int64_t D, float *dst) {
    int64_t full = n / NP, d_vec = D - D % VW;
    for (int64_t p = 0; p < full; p++) {
        const float *src = k + p * NP * D;
        float *P = dst + p * D * NP;
        for (int64_t d0 = 0; d0 < d_vec; d0 += VW) {
            vf r[VW];
#pragma GCC unroll 16
            for (int j = 0; j < VW; j++) r[j] = ld(src + j * D + d0);
            transpose_tile(r);
#pragma GCC unroll 16
            for (int i = 0; i < VW; i++) st(P + (d0 + i) * NP, r[i]);
        }
        for (int64_t j = 0; j < NP; j++)
            for (int64_t d = d_vec; d < D; d++) P[d * NP + j] = src[j * D + d];
    }
    for (int64_t p = full; p < (n + NP - 1) / NP; p++) {
        float *P = dst + p * D * NP;
        for (int64_t j = 0; j < NP; j++) {
            int64_t key = p * NP + j;
            for (int64_t d = 0; d < D; d++) P[d * NP + j] = key < n ? k[key * D + d] : 0.0f;
        }
    }
}

/* sc[r][c] = scale * q_r . key(p0 * NP + c) for the MR rows and the packed panels [p0, p1) */
static inline void qk_tile(const float *const *q, const float *panels, int64_t p0, int64_t p1, int64_t D,
                           float scale, float *sc, int64_t ld_sc) {
    int64_t p = p0;
    for (; p + 1 < p1; p += 2) {
        const float *A = panels + p * D * NP, *B = A + D * NP;
        vf c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
        vf c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
        for (int64_t d = 0; d < D; d++) {
            vf a = ld(A + d * NP), b = ld(B + d * NP);
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
        vf c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0};
        for (int64_t d = 0; d < D; d++) {
            vf a = ld(A + d * NP);
            c0 += q[0][d] * a; c1 += q[1][d] * a; c2 += q[2][d] * a;
            c3 += q[3][d] * a; c4 += q[4][d] * a; c5 += q[5][d] * a;
        }
        float *o = sc + (p - p0) * NP;
        st(o, c0 * scale); st(o + ld_sc, c1 * scale); st(o + 2 * ld_sc, c2 * scale);
        st(o + 3 * ld_sc, c3 * scale); st(o + 4 * ld_sc, c4 * scale); st(o + 5 * ld_sc, c5 * scale);
    }
}

/* exp(row - m) over n columns (a multiple of NP), columns outside [keep0, keep1) set to zero; returns the sum.
 * One pass: each vector is exponentiated, masked and added to the lanes' partial sums (the sum's order is the
 * columns' order within each lane, then the lanes in order). */
static inline float exp_keep(float *row, int64_t n, float m, int64_t keep0, int64_t keep1) {
    vi lane;
    for (int k = 0; k < NP; k++) lane[k] = k;
    vf s = {0};
    for (int64_t c = 0; c < n; c += NP) {
        vf e = vexp(ld(row + c) - m);
        if (c < keep0 || c + NP > keep1) {  /* an edge vector: zero the columns the row does not see */
            vi col = lane + (int32_t)c;
            e = vsel((col >= (int32_t)keep0) & (col < (int32_t)keep1), e, splat(0.0f));
        }
        st(row + c, e);
        s += e;
    }
    float sum = 0.0f;
    for (int k = 0; k < NP; k++) sum += s[k];
    return sum;
}

static inline float row_max(const float *row, int64_t c0, int64_t c1, float m) {
#pragma omp simd reduction(max : m)
    for (int64_t c = c0; c < c1; c++) m = row[c] > m ? row[c] : m;
    return m;
}

#endif
