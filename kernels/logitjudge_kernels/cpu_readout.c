/* Full-vocabulary log-sum-exp of hidden @ weight.T for CPU in fp32 (see cpu_readout.py for the reference).
 *
 * The vocabulary is walked in blocks of VB rows of the weight, split across threads; each block is packed into
 * key panels once (cpu_tiles.h) and every block of MR hidden rows takes its logits from it with the same
 * register tile as attention's scores, so the weight is read once per call at any number of rows. The blocks
 * form LANES fixed lanes; each lane keeps a running (max, sum of exp) per row over its blocks in order, run by
 * one thread, and the lanes are combined in order at the end: no result depends on the thread count (a spare
 * thread may run while the machine is busy, spare_thread.py). No (R, V) logits.
 */
#include <omp.h>
#include <stdlib.h>

#include "cpu_tiles.h"

#define VB 256 /* vocabulary rows per block: VB x d floats packed, ~640 KB at d = 640 */
#define LANES 12 /* fixed split of a call's blocks (2, 3, 4 or 6 threads share it evenly; taken dynamically, so a
                  * thread that shares its core with another process takes fewer) */

/* lse[r] = log sum_v exp(h[r] . w[v]); h (R, d), w (V, d), contiguous. Returns 0, or 1 without scratch memory. */
int logsumexp_f32(const float *h, const float *w, float *lse, int64_t R, int64_t V, int64_t d, int threads) {
    int64_t blocks = (V + VB - 1) / VB, row_blocks = (R + MR - 1) / MR;
    float *part_max = malloc(sizeof(float) * LANES * R);
    double *part_sum = malloc(sizeof(double) * LANES * R); /* a lane's block sums added in double */
    float *scratch = malloc(sizeof(float) * threads * (VB * d + MR * VB));
    if (!part_max || !part_sum || !scratch) {
        free(part_max);
        free(part_sum);
        free(scratch);
        return 1;
    }
#pragma omp parallel num_threads(threads)
    {
        float *panels = scratch + omp_get_thread_num() * (VB * d + MR * VB), *sc = panels + VB * d;
#pragma omp for schedule(dynamic, 1)
        for (int lane = 0; lane < LANES; lane++) {
            float *run_max = part_max + lane * R;
            double *run_sum = part_sum + lane * R;
            for (int64_t r = 0; r < R; r++) {
                run_max[r] = -INFINITY;
                run_sum[r] = 0.0;
            }
            for (int64_t b = lane * blocks / LANES; b < (lane + 1) * blocks / LANES; b++) {
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
    }
    for (int64_t r = 0; r < R; r++) {
        float m = -INFINITY;
        double s = 0.0;
        for (int l = 0; l < LANES; l++) m = fmaxf(m, part_max[l * R + r]);
        for (int l = 0; l < LANES; l++)
            if (part_max[l * R + r] > -INFINITY) s += part_sum[l * R + r] * exp((double)part_max[l * R + r] - m);
        lse[r] = (float)(m + log(s));
    }
    free(part_max);
    free(part_sum);
    free(scratch);
    return 0;
}
