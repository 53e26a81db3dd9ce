/* benchmarks/busy_core.py's split of one GEMM over the threads that claim its column chunks as they come
 * (OpenMP's dynamic schedule) or in equal static shares: out (M, N) = x (M, K) . W^T, W packed by MKL per chunk
 * of nc output columns (cblas_sgemm_pack, done by the caller), each chunk one single-threaded
 * cblas_sgemm_compute into its columns of out. MKL's functions come as pointers from the torch library the
 * process has loaded (they are exported there); no MKL headers or linking. Built through
 * logitjudge_kernels._cbuild, so the OpenMP runtime is torch's. */
#include <omp.h>

typedef void (*sgemm_compute_fn)(int, int, int, int, int, int, const float *, int, const void *, int, float,
                                 float *, int);
typedef int (*set_threads_local_fn)(int);

enum { ROW_MAJOR = 101, NO_TRANS = 111, PACKED = 151 };

void chunked_linear(void *compute_fn, void *set_threads_fn, const float *x, int M, int K, int N, int nc,
                    void **packs, float *out, int threads, int dynamic) {
    sgemm_compute_fn compute = (sgemm_compute_fn)compute_fn;
    set_threads_local_fn set_local = (set_threads_local_fn)set_threads_fn;
    int chunks = (N + nc - 1) / nc;
    omp_set_schedule(dynamic ? omp_sched_dynamic : omp_sched_static, dynamic ? 1 : 0); /* read by schedule(runtime) */
#pragma omp parallel num_threads(threads)
    {
        int before = set_local(1); /* MKL single-threaded inside this thread: the split is ours */
#pragma omp for schedule(runtime)
        for (int c = 0; c < chunks; c++) {
            int n0 = c * nc, n = N - n0 < nc ? N - n0 : nc;
            compute(ROW_MAJOR, NO_TRANS, PACKED, M, n, K, x, K, packs[c], K, 0.0f, out + n0, N);
        }
        set_local(before);
    }
}
