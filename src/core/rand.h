/* The code base's one small random generator: splitmix64 (Steele, Lea,
 * Flood 2014, with Vigna's reference constants), for what must be
 * reproducible from a seed: the training order, dropout masks, AdaRound's
 * batches, the comparison inputs, the test of gradients.
 *
 *   uint64_t s = seed;
 *   uint64_t x = qf_splitmix64(&s);          // the next 64 bits
 *   uint64_t k = qf_rand_below(&s, 10);      // uniform in [0, 10)
 *   qf_rand_shuffle(order, n, &s);           // Fisher-Yates
 */
#ifndef QF_CORE_RAND_H
#define QF_CORE_RAND_H

#include <stdint.h>

#define QF_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull

/* splitmix64's output function: a bijective mix of z. */
static inline uint64_t qf_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The next output of the generator whose state is *s. */
static inline uint64_t qf_splitmix64(uint64_t *s) { return qf_mix64(*s += QF_SPLITMIX_GAMMA); }

/* Uniform in [0, n), n >= 1: draws below 2^64 mod n are rejected, so that
 * every value is equally likely (no modulo bias). */
static inline uint64_t qf_rand_below(uint64_t *s, uint64_t n)
{
    uint64_t reject = (0 - n) % n, x;
    do x = qf_splitmix64(s);
    while (x < reject);
    return x % n;
}

/* Fisher-Yates: for i = n-1 down to 1, swap order[i] with order[j], j
 * uniform in [0, i]. */
static inline void qf_rand_shuffle(int64_t *order, int64_t n, uint64_t *s)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)qf_rand_below(s, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

#endif
