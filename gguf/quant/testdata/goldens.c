// Writes ggml-goldens.gguf: for each quant type, ggml's quantisation of a
// fixed input (ggml_quantize_chunk, what llama-quantize calls), its
// dequantisation (to_float), the activation quantised by ggml's reference
// quantiser, and ggml-cpu's vec_dot of each row with it. Built and run by
// goldens.sh against a llama.cpp build; the Go tests read the output.
// With -bench it instead times ggml-cpu's vec_dot (one thread) over the
// matrix shape BenchmarkMatVec uses and prints GB/s of weights per type.
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml.h"
#include "ggml-cpu.h"
#include "gguf.h"

// Exported by libggml-base but declared only in an internal header.
void quantize_row_q8_K_ref(const float * x, void * y, int64_t k);
void dequantize_row_q8_K(const void * x, float * y, int64_t k);

enum { NCOL = 512, NROW = 8 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}
static float uniform(void) { return (rnd() >> 8) * (1.0f / 16777216.0f); }
static float gauss(void) {
    float u = uniform() + 1e-7f, v = uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

// The rows exercise ordinary data and the corners of each quantiser.
static void make_input(float * x) {
    for (int r = 0; r < NROW; r++) {
        float * y = x + r * NCOL;
        for (int i = 0; i < NCOL; i++) {
            const int b = i / 32, j = i % 32;
            float v = gauss();
            switch (r) {
            case 0: break;                                                         // plain normal
            case 1: v *= powf(10.0f, (float)(b % 7) - 3.0f); break;                 // 1e-3 .. 1e3 by block
            case 2: v = 2.0f * uniform() - 1.0f; break;                            // uniform
            case 3: v = v * v * v; break;                                          // heavy tails
            case 4: v = fabsf(v) + 0.25f; break;                                   // all positive
            case 5: v = -fabsf(v); break;                                          // all non-positive
            case 6:                                                                // special blocks
                switch (b % 8) {
                case 0: v = 0.0f; break;                                           // all zero
                case 1: v = 0.75f; break;                                          // constant
                case 2: v = (j == 5) ? 100.0f : 0.01f * v; break;                  // one outlier
                case 3: v = 1e-20f * v; break;                                     // below the epsilons
                case 4: v = (float)((j % 17) - 8) * 0.5f; break;                   // exact halves
                case 5: v = (j & 1) ? 1.0f : -1.0f; break;                         // alternating
                case 6: v = (j == 0) ? -127.0f : (float)(j - 16) + 0.5f; break;    // Q8 rounding ties
                default: break;
                }
                break;
            case 7: v *= (b & 1) ? 60000.0f : 1e-6f; break;                       // fp16 range
            }
            y[i] = v;
        }
    }
}

static struct ggml_context * ctx;
static struct gguf_context * gctx;

static void add(const char * name, enum ggml_type type, int64_t ne0, int64_t ne1, const void * data) {
    struct ggml_tensor * t = ne1 > 1 ? ggml_new_tensor_2d(ctx, type, ne0, ne1) : ggml_new_tensor_1d(ctx, type, ne0);
    memcpy(t->data, data, ggml_nbytes(t));
    ggml_set_name(t, name);
    gguf_add_tensor(gctx, t);
}

// ref_quantize quantises n floats to type t with ggml's reference code.
static void ref_quantize(enum ggml_type t, const float * x, void * y, int64_t n) {
    switch (t) {
    case GGML_TYPE_F32: memcpy(y, x, n * sizeof(float)); break;
    case GGML_TYPE_Q8_K: quantize_row_q8_K_ref(x, y, n); break;
    default: ggml_get_type_traits(t)->from_float_ref(x, y, n); break;
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// bench prints ggml's single-thread mat-vec speed in GB/s of weights.
static int bench(void) {
    enum { COLS = 4096, ROWS = 256 };
    const enum ggml_type types[] = {
        GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
        GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
        GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4,
    };
    float * w = malloc(sizeof(float) * COLS * ROWS), x[COLS], out[ROWS];
    for (int i = 0; i < COLS * ROWS; i++) w[i] = gauss();
    for (int i = 0; i < COLS; i++) x[i] = gauss();
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        const enum ggml_type t = types[k];
        const struct ggml_type_traits_cpu * cpu = ggml_get_type_traits_cpu(t);
        const size_t rs = ggml_row_size(t, COLS);
        uint8_t * q = malloc(rs * ROWS), * a = malloc(ggml_row_size(cpu->vec_dot_type, COLS));
        ggml_quantize_chunk(t, w, q, 0, ROWS, COLS, NULL);
        if (cpu->vec_dot_type == GGML_TYPE_F32) memcpy(a, x, sizeof x);
        else ggml_get_type_traits_cpu(cpu->vec_dot_type)->from_float(x, a, COLS);
        double best = 1e30;
        for (int rep = 0; rep < 20; rep++) {
            const double t0 = now();
            for (int r = 0; r < ROWS; r++) cpu->vec_dot(COLS, &out[r], 0, q + r * rs, 0, a, 0, 1);
            const double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("%-7s %8.2f GB/s (ggml vec_dot, 1 thread, %dx%d, best of 20)\n", ggml_type_name(t), rs * ROWS / best / 1e9, ROWS, COLS);
        free(q); free(a);
    }
    free(w);
    return 0;
}

int main(int argc, char ** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s OUT.gguf | -bench\n", argv[0]); return 2; }
    ggml_cpu_init();
    if (strcmp(argv[1], "-bench") == 0) return bench();
    struct ggml_init_params ip = { 256u << 20, NULL, false };
    ctx = ggml_init(ip);
    gctx = gguf_init_empty();
    gguf_set_val_str(gctx, "goldens.generator", "gguf/quant/testdata/goldens.c");
    gguf_set_val_u32(gctx, "goldens.ncol", NCOL);
    gguf_set_val_u32(gctx, "goldens.nrow", NROW);

    // ggml's block geometry for every type id, removed ones included (0, 0).
    int32_t traits[GGML_TYPE_COUNT * 2];
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct ggml_type_traits * tr = ggml_get_type_traits(t);
        traits[2*t] = (int32_t) tr->blck_size;
        traits[2*t+1] = (int32_t) tr->type_size;
    }
    gguf_set_arr_data(gctx, "goldens.type_traits", GGUF_TYPE_INT32, traits, GGML_TYPE_COUNT * 2);

    static float x[NCOL * NROW], act[NCOL], deq[NCOL * NROW], dots[NROW], dots_cpu[NROW];
    make_input(x);
    for (int i = 0; i < NCOL; i++) act[i] = gauss();
    add("input", GGML_TYPE_F32, NCOL, NROW, x);
    add("act", GGML_TYPE_F32, NCOL, 1, act);

    // Half-precision conversions, specials included.
    {
        float h[64];
        const float sp[] = { 0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f,
            6.0e-8f, 5.9604645e-8f, 2.9802322e-8f, 2.98e-8f, 1e-8f, 6.1035156e-5f, 6.1e-5f,
            1.00048828125f, 1.0009765625f, 1.00146484375f, 3.14159265f, INFINITY, -INFINITY, NAN, -NAN };
        const int nsp = sizeof(sp) / sizeof(sp[0]);
        for (int i = 0; i < 64; i++) h[i] = i < nsp ? sp[i] : gauss() * powf(2.0f, (float)(i % 40) - 20.0f);
        uint16_t f16[64], bf16[64];
        ggml_fp32_to_fp16_row(h, (ggml_fp16_t *) f16, 64);
        ggml_fp32_to_bf16_row_ref(h, (ggml_bf16_t *) bf16, 64);
        add("half.in", GGML_TYPE_F32, 64, 1, h);
        add("half.f16", GGML_TYPE_F16, 64, 1, f16);
        add("half.bf16", GGML_TYPE_BF16, 64, 1, bf16);
    }

    const enum ggml_type types[] = {
        GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
        GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
        GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4,
    };
    char name[64];
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        const enum ggml_type t = types[k];
        const char * tn = ggml_type_name(t);
        const size_t rs = ggml_row_size(t, NCOL);
        uint8_t * q = malloc(rs * NROW);
        ggml_quantize_chunk(t, x, q, 0, NROW, NCOL, NULL);
        if (t == GGML_TYPE_F32) memcpy(deq, q, sizeof deq); // F32 has no to_float
        else ggml_get_type_traits(t)->to_float(q, deq, (int64_t) NCOL * NROW);

        const struct ggml_type_traits_cpu * cpu = ggml_get_type_traits_cpu(t);
        const enum ggml_type vt = cpu->vec_dot_type;
        const size_t vrs = ggml_row_size(vt, NCOL);
        uint8_t * a = malloc(vrs), * acpu = malloc(vrs);
        ref_quantize(vt, act, a, NCOL);
        if (vt == GGML_TYPE_F32) memcpy(acpu, act, vrs); else ggml_get_type_traits_cpu(vt)->from_float(act, acpu, NCOL);
        for (int r = 0; r < NROW; r++) {
            cpu->vec_dot(NCOL, &dots[r], 0, q + r * rs, 0, a, 0, 1);
            cpu->vec_dot(NCOL, &dots_cpu[r], 0, q + r * rs, 0, acpu, 0, 1);
        }
        snprintf(name, sizeof name, "%s.q", tn);        add(name, t, NCOL, NROW, q);
        snprintf(name, sizeof name, "%s.deq", tn);      add(name, GGML_TYPE_F32, NCOL, NROW, deq);
        snprintf(name, sizeof name, "%s.act", tn);      add(name, vt, NCOL, 1, a);
        snprintf(name, sizeof name, "%s.dot", tn);      add(name, GGML_TYPE_F32, NROW, 1, dots);
        snprintf(name, sizeof name, "%s.dot_cpu", tn);  add(name, GGML_TYPE_F32, NROW, 1, dots_cpu);
        free(q); free(a); free(acpu);
    }

    // The activation formats on their own (Q8_K also dequantised).
    {
        static uint8_t q[NCOL * NROW * 2];
        ref_quantize(GGML_TYPE_Q8_1, x, q, (int64_t) NCOL * NROW);
        add("q8_1.ref", GGML_TYPE_Q8_1, NCOL, NROW, q);
        for (int r = 0; r < NROW; r++) quantize_row_q8_K_ref(x + r * NCOL, q + r * ggml_row_size(GGML_TYPE_Q8_K, NCOL), NCOL);
        dequantize_row_q8_K(q, deq, (int64_t) NCOL * NROW);
        add("q8_K.ref", GGML_TYPE_Q8_K, NCOL, NROW, q);
        add("q8_K.deq", GGML_TYPE_F32, NCOL, NROW, deq);
    }

    if (!gguf_write_to_file(gctx, argv[1], false)) { fprintf(stderr, "write %s failed\n", argv[1]); return 1; }
    gguf_free(gctx);
    ggml_free(ctx);
    return 0;
}
