/* Random constants and BatchNorms for the tests that build graphs by hand
 * (QAT, the passes, the quantizer): one generator (64-bit LCG, the top 53
 * bits as a double in [-1, 1)), each test file with its own state so that
 * its data do not depend on another file's.
 *
 *   static uint64_t rng = 0x5eedf00dull;
 *   qf_value *w = qf_test_const(g, &rng, "w", QF_VALUE_PARAMETER, 4, dims, -1, 1);
 *   qf_node *b = qf_test_bn(g, &rng, "bn1", conv->outputs[0], channels);
 *
 * BatchNorm statistics are random and never fresh (γ in [0.5, 1.5], β in
 * [-0.5, 0.5], μ in [-0.3, 0.3], σ² in [0.5, 2]): a fresh BN is the identity
 * and hides every bug. */
#ifndef QF_TEST_GRAPH_H
#define QF_TEST_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "qfold/graph.h"

static inline float qf_test_rnd(uint64_t *rng)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*rng >> 11) / (double)(1ull << 52) - 1.0);
}

/* A float32 constant of `kind` with values uniform in [lo, hi]. */
static inline qf_value *qf_test_const(qf_graph *g, uint64_t *rng, const char *name, qf_value_kind kind, int ndim,
                                      const int64_t *dims, float lo, float hi)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims) != QF_OK) return NULL;
    float *p = t.data;
    for (int64_t i = 0; i < qf_tensor_numel(&t); i++) p[i] = lo + (hi - lo) * 0.5f * (qf_test_rnd(rng) + 1.0f);
    qf_value *v = qf_graph_add_constant(g, name, kind, &t);
    if (!v) qf_tensor_free(&t);
    return v;
}

/* BatchNormalization(x) over c channels, parameters named <name>_gamma,
 * _beta (parameters), _mean, _var (buffers). */
static inline qf_node *qf_test_bn(qf_graph *g, uint64_t *rng, const char *name, qf_value *x, int64_t c)
{
    static const char *const part[4] = {"gamma", "beta", "mean", "var"};
    static const float lo[4] = {0.5f, -0.5f, -0.3f, 0.5f}, hi[4] = {1.5f, 0.5f, 0.3f, 2.0f};
    qf_value *in[5] = {x};
    for (int i = 0; i < 4; i++) {
        char n[128];
        snprintf(n, sizeof n, "%s_%s", name, part[i]);
        in[i + 1] = qf_test_const(g, rng, n, i < 2 ? QF_VALUE_PARAMETER : QF_VALUE_BUFFER, 1, &c, lo[i], hi[i]);
        if (!in[i + 1]) return NULL;
    }
    return qf_graph_add_node(g, QF_OP_BATCH_NORM, name, 5, in, 1);
}

#endif
