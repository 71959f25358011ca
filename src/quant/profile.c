/* Target profiles as data: one table per target, naming the ops it
 * quantizes (how each op is quantized is its row, op_quant.c).
 *
 * neutron mirrors the NXP eIQ Neutron quantizer (ExecuTorch
 * backends/nxp/quantizer): activations int8 [-128, 127] per-tensor affine
 * through a histogram observer with scale >= 2^-12; conv weights per-channel
 * symmetric [-127, 127]; linear weights per-tensor symmetric; int32 bias;
 * conv/linear + ReLU / ReLU6 fused (the Neutron converter's fused
 * activations; a Clip to another range is not); pools, reshapes, pad, slice
 * sharing their input's qparams; a concat's inputs and output on one set of
 * qparams (its converter requires them equal: the quantizer's
 * SharedQuantizationSpec, one observer over every input); softmax / sigmoid
 * / tanh at fixed qparams; add / sub / mul quantized on every side; a MatMul
 * of two activations with per-tensor symmetric inputs (its BMM converter
 * requires zero points 0).
 * generic: per-channel weights everywhere, min/max observers, reductions
 * with their own output qparams, concat inputs requantized to the first's,
 * and a few more ops with their own qparams.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/quant.h"

/* The ops patterns.py of the Neutron quantizer quantizes (how: each op's
 * row, op_quant.c). */
#define QF_NEUTRON_OPS                                                                                 \
    [QF_OP_CONV] = true, [QF_OP_CONV_TRANSPOSE] = true, [QF_OP_LINEAR] = true, [QF_OP_GEMM] = true,    \
    [QF_OP_MATMUL] = true, [QF_OP_RELU] = true, [QF_OP_RELU6] = true, [QF_OP_CLIP] = true,             \
    [QF_OP_MAX_POOL] = true, [QF_OP_AVG_POOL] = true, [QF_OP_FLATTEN] = true, [QF_OP_RESHAPE] = true,  \
    [QF_OP_TRANSPOSE] = true, [QF_OP_SQUEEZE] = true, [QF_OP_UNSQUEEZE] = true, [QF_OP_PAD] = true,    \
    [QF_OP_RESIZE] = true, [QF_OP_SPLIT] = true,                                                       \
    [QF_OP_SLICE] = true, [QF_OP_DROPOUT] = true, [QF_OP_IDENTITY] = true, [QF_OP_CONCAT] = true,      \
    [QF_OP_SOFTMAX] = true, [QF_OP_SIGMOID] = true, [QF_OP_TANH] = true, [QF_OP_ADD] = true,           \
    [QF_OP_SUB] = true, [QF_OP_MUL] = true, [QF_OP_GLOBAL_AVG_POOL] = true, [QF_OP_REDUCE_MEAN] = true,  \
    [QF_OP_EXP] = true, [QF_OP_LOG] = true, [QF_OP_REDUCE_SUM] = true, [QF_OP_REDUCE_MAX] = true, \
    [QF_OP_PRELU] = true, [QF_OP_MAX] = true, [QF_OP_MIN] = true, [QF_OP_ABS] = true

/* HardSwish is a Neutron op (ExecuTorch's hardswish converter); HardSigmoid
 * reaches it as what it decomposes into (add, ReLU6, mul: the TFLite export
 * writes ADD with RELU6 and MUL); LeakyRelu is one too (its leaky_relu
 * converter, int8 I/O; the quantizer's LeakyReluPattern observes its input
 * and its output). All at their own output qparams (the profile's
 * observer), as the Neutron quantizer's activation patterns. */
#define QF_NEUTRON_HARD_OPS [QF_OP_HARD_SWISH] = true, [QF_OP_HARD_SIGMOID] = true, [QF_OP_LEAKY_RELU] = true

static const qf_quant_profile qf_profile_neutron = {
    .name = "neutron",
    .summary = "NXP eIQ Neutron NPU (as the Neutron quantizer of ExecuTorch)",
    .activation = {QF_QSCHEME_AFFINE, -128, 127, false, QF_OBSERVER_HISTOGRAM},
    .conv_weight = {QF_QSCHEME_SYMMETRIC, -127, 127, true, QF_OBSERVER_MIN_MAX},
    .linear_weight = {QF_QSCHEME_SYMMETRIC, -127, 127, false, QF_OBSERVER_MIN_MAX},
    .min_scale = 0x1p-12f,
    .fuse_activation = true,
    .fuse_any_clip = false,
    .concat_shares = true,
    .matmul_symmetric = true,
    .reduction_shares = true,
    .equalize = QF_QEQ_AUTO,
    .neutron_passes = true,
    .adaround_iters = QF_QUANT_ADAROUND_ITERS,
    .adaround_reg = (float)QF_QUANT_ADAROUND_REG,
    .ops = {QF_NEUTRON_OPS, QF_NEUTRON_HARD_OPS},
};

static const qf_quant_profile qf_profile_generic = {
    .name = "generic",
    .summary = "per-channel int8 weights, min/max observers (a TFLite-style scheme)",
    .activation = {QF_QSCHEME_AFFINE, -128, 127, false, QF_OBSERVER_MIN_MAX},
    .conv_weight = {QF_QSCHEME_SYMMETRIC, -127, 127, true, QF_OBSERVER_MIN_MAX},
    .linear_weight = {QF_QSCHEME_SYMMETRIC, -127, 127, true, QF_OBSERVER_MIN_MAX},
    .min_scale = 0x1p-23f, /* FLT_EPSILON, torch's default */
    .fuse_activation = true,
    .fuse_any_clip = true, /* the int8 executor clamps to any range */
    .concat_shares = false,
    .matmul_symmetric = false,
    .reduction_shares = false,
    .equalize = QF_QEQ_AUTO,
    .adaround_iters = QF_QUANT_ADAROUND_ITERS,
    .adaround_reg = (float)QF_QUANT_ADAROUND_REG,
    .every_op = true, /* with LeakyRelu, HardSwish, HardSigmoid at their own qparams */
};

static const qf_quant_profile *const qf_profiles[] = {&qf_profile_neutron, &qf_profile_generic};
#define QF_NPROFILES (sizeof qf_profiles / sizeof qf_profiles[0])

const qf_quant_profile *qf_quant_profile_find(const char *name)
{
    for (size_t i = 0; i < QF_NPROFILES; i++)
        if (strcmp(qf_profiles[i]->name, name) == 0) return qf_profiles[i];
    return NULL;
}

/* The names are read off the profiles (their .name is the one place a name
 * is written), once: a static initializer cannot read another object's
 * field, and pthread_once makes the first call from any thread fill it. */
static const char *qf_profile_name_list[QF_NPROFILES + 1];
static pthread_once_t qf_profile_names_once = PTHREAD_ONCE_INIT;

static void qf_profile_names_init(void)
{
    for (size_t i = 0; i < QF_NPROFILES; i++) qf_profile_name_list[i] = qf_profiles[i]->name;
    qf_profile_name_list[QF_NPROFILES] = NULL;
}

const char *const *qf_quant_profile_names(void)
{
    pthread_once(&qf_profile_names_once, qf_profile_names_init);
    return qf_profile_name_list;
}

/* --- --set KEY=VALUE ----------------------------------------------------------- */

typedef struct qf_profile_key {
    const char *key, *values;
    qf_status (*apply)(qf_quant_profile *p, const char *v);
} qf_profile_key;

static qf_status set_reduction(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "own")) p->reduction_shares = false;
    else if (!strcmp(v, "shared")) p->reduction_shares = true;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_granularity(qf_qformat *f, const char *v)
{
    if (!strcmp(v, "per-channel")) f->per_channel = true;
    else if (!strcmp(v, "per-tensor")) f->per_channel = false;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_linear(qf_quant_profile *p, const char *v) { return set_granularity(&p->linear_weight, v); }
static qf_status set_conv(qf_quant_profile *p, const char *v) { return set_granularity(&p->conv_weight, v); }

static qf_status set_observer(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "histogram")) p->activation.observer = QF_OBSERVER_HISTOGRAM;
    else if (!strcmp(v, "minmax")) p->activation.observer = QF_OBSERVER_MIN_MAX;
    else if (!strcmp(v, "moving-average")) p->activation.observer = QF_OBSERVER_MOVING_AVERAGE;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_fuse(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "on")) p->fuse_activation = true;
    else if (!strcmp(v, "off")) p->fuse_activation = false;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_neutron_passes(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "on")) p->neutron_passes = true;
    else if (!strcmp(v, "off")) p->neutron_passes = false;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_concat(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "shared")) p->concat_shares = true;
    else if (!strcmp(v, "first")) p->concat_shares = false;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_matmul(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "symmetric")) p->matmul_symmetric = true;
    else if (!strcmp(v, "activation")) p->matmul_symmetric = false;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_equalize(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "per-tensor")) p->equalize = QF_QEQ_PER_TENSOR;
    else if (!strcmp(v, "all")) p->equalize = QF_QEQ_ALL;
    else if (!strcmp(v, "off")) p->equalize = QF_QEQ_OFF;
    else if (!strcmp(v, "auto")) p->equalize = QF_QEQ_AUTO;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_bias_correction(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "off")) p->bias_correction = QF_QBIAS_OFF;
    else if (!strcmp(v, "empirical")) p->bias_correction = QF_QBIAS_EMPIRICAL;
    else if (!strcmp(v, "analytical")) p->bias_correction = QF_QBIAS_ANALYTICAL;
    else if (!strcmp(v, "auto")) p->bias_correction = QF_QBIAS_AUTO;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_min_scale(qf_quant_profile *p, const char *v)
{
    char *end = NULL;
    double d = strtod(v, &end);
    if (!*v || *end || !(d > 0.0) || !isfinite(d) || d > 1.0) return QF_ERR_INVALID;
    p->min_scale = (float)d;
    return QF_OK;
}

static qf_status set_rounding(qf_quant_profile *p, const char *v)
{
    if (!strcmp(v, "nearest")) p->weight_rounding = QF_QROUND_NEAREST;
    else if (!strcmp(v, "adaround")) p->weight_rounding = QF_QROUND_ADAROUND;
    else return QF_ERR_INVALID;
    return QF_OK;
}

static qf_status set_adaround_iters(qf_quant_profile *p, const char *v)
{
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || n < 1 || n > 1000000) return QF_ERR_INVALID;
    p->adaround_iters = (int)n;
    return QF_OK;
}

static qf_status set_adaround_reg(qf_quant_profile *p, const char *v)
{
    char *end = NULL;
    double d = strtod(v, &end);
    if (!*v || *end || !(d >= 0.0) || !isfinite(d) || d > 1e6) return QF_ERR_INVALID;
    p->adaround_reg = (float)d;
    return QF_OK;
}

static const qf_profile_key qf_profile_keys[] = {
    {"reduction-scale", "own|shared", set_reduction},
    {"linear-weights", "per-tensor|per-channel", set_linear},
    {"conv-weights", "per-tensor|per-channel", set_conv},
    {"activation-observer", "histogram|minmax|moving-average", set_observer},
    {"fuse-activation", "on|off", set_fuse},
    {"min-scale", "a number in (0, 1]", set_min_scale},
    {"equalize", "auto|per-tensor|all|off", set_equalize},
    {"neutron-passes", "on|off", set_neutron_passes},
    {"concat-scale", "shared|first", set_concat},
    {"matmul-inputs", "symmetric|activation", set_matmul},
    {"bias-correction", "off|empirical|analytical|auto", set_bias_correction},
    {"weight-rounding", "nearest|adaround", set_rounding},
    {"adaround-iters", "a whole number from 1 to 1000000", set_adaround_iters},
    {"adaround-reg", "a number from 0 to 1e6", set_adaround_reg},
};

#define QF_NKEYS (sizeof qf_profile_keys / sizeof qf_profile_keys[0])

/* "key (values), key (values), ..." for messages. */
static const char *keys_text(char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < QF_NKEYS && at < size; i++) {
        int w = snprintf(buf + at, size - at, "%s%s=%s", i ? ", " : "", qf_profile_keys[i].key,
                         qf_profile_keys[i].values);
        if (w < 0) break;
        at += (size_t)w;
    }
    return buf;
}

qf_status qf_quant_profile_set(qf_quant_profile *p, const char *rule)
{
    const char *eq = strchr(rule, '=');
    char keys[1024];
    if (!eq) return qf_error(QF_ERR_INVALID, "profile rule '%s': expected KEY=VALUE, one of %s", rule, keys_text(keys, sizeof keys));
    size_t klen = (size_t)(eq - rule);
    for (size_t i = 0; i < QF_NKEYS; i++) {
        const qf_profile_key *k = &qf_profile_keys[i];
        if (strlen(k->key) != klen || strncmp(k->key, rule, klen) != 0) continue;
        if (k->apply(p, eq + 1) != QF_OK)
            return qf_error(QF_ERR_INVALID, "profile rule '%s': %s takes %s", rule, k->key, k->values);
        return QF_OK;
    }
    return qf_error(QF_ERR_INVALID, "profile rule '%s': unknown key '%.*s'; the keys are %s", rule, (int)klen,
                    rule, keys_text(keys, sizeof keys));
}

qf_status qf_quant_profile_make(const char *target, const char *const *sets, int nsets, qf_quant_profile **out)
{
    *out = NULL;
    const char *name = target ? target : "neutron";
    const qf_quant_profile *base = qf_quant_profile_find(name);
    if (!base) {
        const char *const *names = qf_quant_profile_names();
        return qf_error(QF_ERR_INVALID, "unknown target '%s' (targets: %s, %s)", name, names[0], names[1]);
    }
    qf_quant_profile *p = qf_malloc(sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    *p = *base;
    for (int i = 0; i < nsets; i++) {
        qf_status st = qf_quant_profile_set(p, sets[i]);
        if (st != QF_OK) {
            qf_free(p);
            return st;
        }
    }
    *out = p;
    return QF_OK;
}
