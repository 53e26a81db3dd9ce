/* Full-vocabulary log-sum-exp of hidden @ weight.T for CPU in fp32 (see cpu_readout.py for the reference).
 *
 * The vocabulary is walked in blocks of VB rows of the weight, split across threads; each block is packed into
 * key panels once (cpu_tiles.h) and every block of MR hidden rows takes its logits from it with the same
 * register tile as attention's scores, so the weight is read once per call at any number of rows. Each thread
 * keeps a running (max, sum of exp) per row; the threads' partials are combined at the end. No (R, V) logits.
 */
#include <omp.h>
#include <stdlib.h>

#include "cpu_tiles.h"

#define VB 256 /* vocabulary rows per block: VB x d floats packed, ~640 KB at d = 640 */

/* lse[r] = log sum_v exp(h[r] . w[v]); h (R, d), w (V, d), contiguous. Returns 0, or 1 without scratch memory. */
int logsumexp_f32(const float *h, const float *w, float *lse, int64_t R, int64_t V, int64_t d, int threads) {
    int64_t blocks = (V + VB - 1) / VB, row_blocks = (R + MR - 1) / MR;
    float *part_max = malloc(sizeof(float) * threads * R);
    double *part_sum = malloc(sizeof(double) * threads * R); /* 1,000+ block sums per row: add them in double */
    float *scratch = malloc(sizeof(float) * threads * (VB * d + MR * VB));
    if (!part_max || !part_sum || !scratch) {
        free(part_max);
        free(part_sum);
        free(scratch);
        return 1;
    }
    int used = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
#pragma omp single
        used = omp_get_num_threads();
        float *run_max = part_max + t * R;
        double *run_sum = part_sum + t * R;
        float *panels = scratch + t * (VB * d + MR * VB), *sc = panels + VB * d;
        for (int64_t r = 0; r < R; r++) {
            run_max[r] = -INFINITY;
            run_sum[r] = 0.0;
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < blocks; b++) {
            int64_t v0 = b * VB, nv = min64(VB, V - v0), np = (nv + NP - 1) / NP;
            pack_keys(w + v0 * d, nv, d, panels);
            for (int64_t rb = 0; rb < row_blocks; rb++) {
                int64_t r0 = rb * MR, n_rows = min64(MR, R - r0);
                const float *qr[MR];
                for (int64_t i = 0; i < MR; i++) qr[i] = h + (r0 + min64(i, n_rows - 1)) * d;
                qk_tile(qr, panels, 0, np, d, 1.0f, sc, VB);
                for (int64_t i = 0; i < n_rows; i++) {
                    int64_t r = r0 + i;
                    float *row = sc + i * VB;
                    float m = row_max(row, 0, nv, run_max[r]);
                    float s = exp_keep(row, np * NP, m, 0, nv);
                    run_sum[r] = run_sum[r] * exp((double)run_max[r] - m) + s;
                    run_max[r] = m;
                }
            }
        }
    }
    for (int64_t r = 0; r < R; r++) {
        float m = -INFINITY;
        double s = 0.0;
        for (int t = 0; t < used; t++) m = fmaxf(m, part_max[t * R + r]);
        for (int t = 0; t < used; t++)
            if (part_max[t * R + r] > -INFINITY) s += part_sum[t * R + r] * exp((double)part_max[t * R + r] - m);
        lse[r] = (float)(m + log(s));
    }
    free(part_max);
    free(part_sum);
    free(scratch);
    return 0;
}
