/* A standalone check of the C kernels against plain fp64 loops, for builds that Python cannot load here: the
 * aarch64 (NEON) build, cross-compiled and run under qemu by tests/test_cpu_aarch64.py. Prints each kernel's max
 * absolute error and the vector width; exit status 0 when all are within the kernels' stated tolerances. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int tiles_vector_width(void);
int logsumexp_f32(const float *h, const float *w, float *lse, int64_t R, int64_t V, int64_t d, int threads);
int prefix_attention_f32(const float *q, const float *k_pre, const float *v_pre, const float *k_suf,
                         const float *v_suf, float *out, const float *sinks, int64_t B, int64_t Hkv, int64_t G,
                         int64_t S, int64_t L, int64_t D, int64_t window, float scale, int64_t s0, int64_t s1,
                         int threads);
void rms_norm_f32(const float *x, int64_t x_stride, const float *w, float *out, int64_t rows, int64_t d, float eps,
                  int threads);

static uint64_t state = 12345;
static float rnd(void) { /* uniform in [-1, 1) */
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((state >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}
static float *filled(int64_t n, float scale) {
    float *p = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) p[i] = rnd() * scale;
    return p;
}

static double readout_error(void) {
    int64_t R = 7, V = 1000, d = 40;
    float *h = filled(R * d, 2.0f), *w = filled(V * d, 1.0f), lse[7];
    if (logsumexp_f32(h, w, lse, R, V, d, 2)) return INFINITY;
    double err = 0;
    for (int64_t r = 0; r < R; r++) {
        double m = -INFINITY, s = 0, z[1000];
        for (int64_t v = 0; v < V; v++) {
            z[v] = 0;
            for (int64_t k = 0; k < d; k++) z[v] += (double)h[r * d + k] * w[v * d + k];
            m = fmax(m, z[v]);
        }
        for (int64_t v = 0; v < V; v++) s += exp(z[v] - m);
        err = fmax(err, fabs(lse[r] - (m + log(s))));
    }
    return err;
}

/* q (B, Hkv, G, S, D), prefix (Hkv, L, D), suffix (B, Hkv, S, D) -> out (B, S, Hkv G, D), as the kernel */
static double attention_error(int64_t window) {
    int64_t B = 2, Hkv = 1, G = 4, S = 9, L = 13, D = 32;
    float scale = 0.3f;
    float *q = filled(B * Hkv * G * S * D, 1), *kp = filled(Hkv * L * D, 1), *vp = filled(Hkv * L * D, 1);
    float *ks = filled(B * Hkv * S * D, 1), *vs = filled(B * Hkv * S * D, 1), *out = filled(B * S * Hkv * G * D, 0);
    if (prefix_attention_f32(q, kp, vp, ks, vs, out, NULL, B, Hkv, G, S, L, D, window, scale, 0, S, 2))
        return INFINITY;
    double err = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t g = 0; g < G; g++)
                for (int64_t s = 0; s < S; s++) {
                    const float *qr = q + (((b * Hkv + h) * G + g) * S + s) * D;
                    double sc[32], m = -INFINITY, sum = 0, o[32] = {0};
                    int64_t pos = L + s;
                    for (int64_t j = 0; j <= pos; j++) {
                        const float *k = j < L ? kp + (h * L + j) * D : ks + ((b * Hkv + h) * S + j - L) * D;
                        sc[j] = -INFINITY;
                        if (window && pos - j >= window) continue;
                        double dot = 0;
                        for (int64_t e = 0; e < D; e++) dot += (double)qr[e] * k[e];
                        sc[j] = dot * scale;
                        m = fmax(m, sc[j]);
                    }
                    for (int64_t j = 0; j <= pos; j++) {
                        if (sc[j] == -INFINITY) continue;
                        const float *v = j < L ? vp + (h * L + j) * D : vs + ((b * Hkv + h) * S + j - L) * D;
                        double p = exp(sc[j] - m);
                        sum += p;
                        for (int64_t e = 0; e < D; e++) o[e] += p * v[e];
                    }
                    const float *got = out + ((b * S + s) * Hkv * G + h * G + g) * D;
                    for (int64_t e = 0; e < D; e++) err = fmax(err, fabs(got[e] - o[e] / sum));
                }
    return err;
}

static double norm_error(void) {
    int64_t rows = 5, d = 33;
    float *x = filled(rows * d, 3), *w = filled(d, 1), *out = filled(rows * d, 0);
    rms_norm_f32(x, d, w, out, rows, d, 1e-6f, 2);
    double err = 0;
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t j = 0; j < d; j++) ss += (double)x[r * d + j] * x[r * d + j];
        double inv = 1 / sqrt(ss / d + 1e-6);
        for (int64_t j = 0; j < d; j++) err = fmax(err, fabs(out[r * d + j] - x[r * d + j] * inv * w[j]));
    }
    return err;
}

int main(void) {
    double e_read = readout_error(), e_att = fmax(attention_error(0), attention_error(5)), e_norm = norm_error();
    printf("vector_width %d readout %.3g attention %.3g rms_norm %.3g\n", tiles_vector_width(), e_read, e_att,
           e_norm);
    return !(e_read <= 1e-5 && e_att <= 5e-6 && e_norm <= 1e-5);
}
