/* The CPU's fp32 fused multiply-add peak: 12 independent chains of one-register FMAs per thread (enough to hide
 * the FMA latency on current x86 and ARM cores), no memory traffic. benchmarks/peers.py reports the matmul rate as
 * a fraction of it. Built and loaded through logitjudge_kernels._cbuild (-O3 -march=native -fopenmp). The vector
 * is one register of the target (as kernels/cpu_tiles.h): 16 floats on AVX-512, 8 on AVX2, 4 else; 16-float
 * vectors on AVX2 take two registers each, the 12 chains then spill and the "peak" measured low (issue 21). */
#include <omp.h>
#include <stdint.h>

#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float v16 __attribute__((vector_size(VW * 4)));

/* GFLOP/s of `threads` threads each running `iters` rounds of 12 vector FMAs; *sink keeps the result alive */
double fma_peak_gflops(int threads, int64_t iters, float *sink) {
    double t0 = omp_get_wtime();
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        v16 acc[12];
        v16 b = (v16){0} + 0.999999f, c = (v16){0} + 1e-7f;
        for (int i = 0; i < 12; i++) acc[i] = (v16){0} + (1.0f + 0.1f * (float)(i + omp_get_thread_num()));
        for (int64_t n = 0; n < iters; n++)
            for (int i = 0; i < 12; i++) acc[i] = acc[i] * b + c;
        for (int i = 0; i < 12; i++)
            for (int k = 0; k < VW; k++) total += acc[i][k];
    }
    double seconds = omp_get_wtime() - t0;
    *sink = total;
    return (double)iters * 12 * VW * 2 * threads / seconds / 1e9;
}

/* The same for the AVX-512 BF16 dot product (vdpbf16ps: 16 lanes x 2 bf16 products + sums = 64 FLOP per
 * instruction), the instruction oneDNN's bf16 GEMMs are built on where the CPU has no AMX. Returns -1 where the
 * build target has no AVX-512 BF16. On the Intel Xeon of docs/performance.md (no AMX) it issues at a quarter of the FMA's
 * rate, so bf16 GEMMs there peak at half the fp32 rate. */
#ifdef __AVX512BF16__
#include <immintrin.h>
#endif
double bf16_dot_peak_gflops(int threads, int64_t iters, float *sink) {
#ifdef __AVX512BF16__
    double t0 = omp_get_wtime();
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        __m512 acc[12];
        __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380); /* 1, ~6e-8 */
        for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps(1.0f + 0.1f * (float)(i + omp_get_thread_num()));
        for (int64_t n = 0; n < iters; n++)
            for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
        for (int i = 0; i < 12; i++) total += _mm512_reduce_add_ps(acc[i]);
    }
    double seconds = omp_get_wtime() - t0;
    *sink = total;
    return (double)iters * 12 * 64 * threads / seconds / 1e9;
#else
    (void)threads, (void)iters, (void)sink;
    return -1.0;
#endif
}
