/* QF_VECTOR_CLONES: compile a kernel's hot loop body for AVX-512, AVX2 and
 * the baseline (SSE2) and let the loader pick the widest the CPU has
 * (GCC / Clang target_clones, an ifunc). Without it a generic x86-64 build
 * runs every elementwise loop four floats at a time.
 *
 * Results do not depend on the clone: qfold compiles its kernels with
 * -std=c11, i.e. -ffp-contract=off (no a * b + c turned into an FMA, even
 * where the target has one), without -ffast-math (the vectorizer keeps the
 * order of every sum: a reduction that should vectorize spells out its
 * partial sums), so each clone does the same float operations in the same
 * order, only more of them at once.
 *
 * Only for static functions that are called through a pointer or are big
 * enough not to be inlined (a clone is never inlined). */
#ifndef QF_OPS_VECTOR_H
#define QF_OPS_VECTOR_H

#if defined(__x86_64__) && defined(__ELF__) && !defined(__SANITIZE_ADDRESS__) &&                     \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
#define QF_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define QF_VECTOR_CLONES
#endif

#endif
