/* The quantization rows (src/quant/op_quant.c), walked: every row's slots lie
 * within its op's arity, a lowering entry belongs to an op with a pattern, a
 * fixed pattern has usable qparams, an int8 op's output qparams are two
 * inputs it always has, and every op a built-in profile names has a row
 * (else the profile would name it for nothing). The checker runs on the real
 * rows (no problem allowed) and on broken copies (each must be caught), so
 * this test can fail. Built against the library and against the extra-op
 * variant (whose made-up ops add rows). */
#include <stdio.h>
#include <string.h>

#include "qfold/schema.h"
#include "quant/op_quant.h"
#include "tools/qf_check.h"

/* Problems of row r of op (printed unless quiet). */
static int row_problems(qf_op op, const qf_op_quant *r, int quiet)
{
    int bad = 0;
#define PROBLEM(...)                                                  \
    do {                                                              \
        if (!quiet) {                                                 \
            fprintf(stderr, "op %d (%s): ", (int)op, qf_op_name(op)); \
            fprintf(stderr, __VA_ARGS__);                             \
            fputc('\n', stderr);                                      \
        }                                                             \
        bad++;                                                        \
    } while (0)
    const qf_op_schema *s = qf_op_schema_get(op);
    const int max_in = s && s->max_inputs >= 0 ? s->max_inputs : 1 << 20;
    const int min_in = s ? s->min_inputs : 0;
    if ((unsigned)r->pattern > QF_QPAT_PRELU) PROBLEM("pattern %d out of range", (int)r->pattern);
    if (r->pattern == QF_QPAT_PRELU && min_in < 2) PROBLEM("PRelu pattern without a slope input");
    if (r->lower && r->pattern == QF_QPAT_NONE)
        PROBLEM("a lowering entry but no pattern: nothing quantizes it");
    if (r->lower_onnx && !r->lower) PROBLEM("lower_onnx without a lowering entry");
    if (r->pattern == QF_QPAT_FIXED &&
        !(r->fixed.scale > 0.0f && r->fixed.zero_point >= -128 && r->fixed.zero_point <= 127))
        PROBLEM("fixed qparams %g, %d", (double)r->fixed.scale, (int)r->fixed.zero_point);
    if (r->pattern == QF_QPAT_CONV || r->pattern == QF_QPAT_LINEAR) {
        if (r->weight_slot < 1 || r->weight_slot >= max_in || r->weight_slot >= min_in)
            PROBLEM("weight slot %d outside the inputs [%d, %d]", r->weight_slot, min_in, max_in);
        if (r->bias_slot != -1 && (r->bias_slot <= r->weight_slot || r->bias_slot >= max_in))
            PROBLEM("bias slot %d", r->bias_slot);
        if (r->weight_axis < 0 || r->weight_axis > 1) PROBLEM("weight axis %d", r->weight_axis);
    }
    if ((unsigned)r->int8 > QF_INT8_PASSES_QPARAMS)
        PROBLEM("int8 kind %d out of range", (int)r->int8);
    if (r->int8 == QF_INT8_QPARAMS_IN && (r->qparams_slot < 0 || r->qparams_slot + 1 >= min_in))
        PROBLEM("output qparams at inputs %d, %d; the op has at least %d inputs", r->qparams_slot,
                r->qparams_slot + 1, min_in);
    for (int p = 0; p < 2; p++) {
        const qf_quant_profile *prof = qf_quant_profile_find(p ? "generic" : "neutron");
        if (prof && prof->ops[op] && r->pattern == QF_QPAT_NONE)
            PROBLEM("profile %s names it but it has no pattern", prof->name);
    }
#undef PROBLEM
    return bad;
}

static void test_real_rows(void)
{
    int bad = 0, patterns = 0, lowerings = 0, int8_ops = 0;
    for (int op = 0; op < QF_OP_COUNT; op++) {
        const qf_op_quant *r = qf_op_quant_get((qf_op)op);
        bad += row_problems((qf_op)op, r, 0);
        patterns += r->pattern != QF_QPAT_NONE;
        lowerings += r->lower != NULL;
        int8_ops += r->int8 == QF_INT8_QPARAMS_IN;
    }
    CHECKF(bad == 0, "%d problems in the quantization rows", bad);
    /* the library's rows at least (the extra-op build has more) */
    CHECKF(patterns >= 31 && lowerings >= 12 && int8_ops >= 9,
           "%d patterns, %d lowerings, %d int8 ops", patterns, lowerings, int8_ops);
    const qf_op_quant *none = qf_op_quant_get(QF_OP_COUNT);
    CHECK(none && none->pattern == QF_QPAT_NONE && !none->lower && none->int8 == QF_INT8_NONE);
    /* what the exporters read */
    CHECK(qf_quant_op_out_qparams_slot(QF_OP_QLINEAR_CONV) == 6 &&
          qf_quant_op_out_qparams_slot(QF_OP_QCONCAT) == 0);
    CHECK(qf_quant_op_out_qparams_slot(QF_OP_CONV) == -1);
    CHECK(qf_quant_op_passes_qparams(QF_OP_MAX_POOL) &&
          !qf_quant_op_passes_qparams(QF_OP_AVG_POOL));
    /* the profiles: neutron's list, generic every op with a pattern */
    const qf_quant_profile *n = qf_quant_profile_find("neutron"),
                           *g = qf_quant_profile_find("generic");
    REQUIRE(n && g, "built-in profiles missing");
    CHECK(qf_quant_profile_takes(n, QF_OP_CONV) && !qf_quant_profile_takes(n, QF_OP_QLINEAR_CONV));
    /* LeakyRelu: own output qparams (the Neutron quantizer's LeakyReluPattern), lowered to int8 */
    CHECK(qf_quant_profile_takes(n, QF_OP_LEAKY_RELU) && qf_quant_profile_takes(g, QF_OP_LEAKY_RELU));
    CHECK(qf_op_quant_get(QF_OP_LEAKY_RELU)->pattern == QF_QPAT_OWN && qf_op_quant_get(QF_OP_LEAKY_RELU)->lower);
    CHECK(qf_quant_profile_takes(n, QF_OP_HARD_SWISH) && qf_quant_profile_takes(n, QF_OP_HARD_SIGMOID));
    CHECK(qf_quant_profile_takes(g, QF_OP_HARD_SWISH) &&
          !qf_quant_profile_takes(g, QF_OP_QLINEAR_CONV));
    CHECK(!qf_quant_profile_takes(g, QF_OP_COUNT));
}

static void test_broken_rows(void)
{
    const qf_op_quant conv = *qf_op_quant_get(QF_OP_CONV), qadd = *qf_op_quant_get(QF_OP_QADD);
    CHECK(row_problems(QF_OP_CONV, &conv, 1) == 0 && row_problems(QF_OP_QADD, &qadd, 1) == 0);
    qf_op_quant r = conv;
    r.weight_slot = 3; /* Conv has at most 3 inputs */
    CHECK(row_problems(QF_OP_CONV, &r, 1) > 0);
    r = conv;
    r.bias_slot = 1;
    CHECK(row_problems(QF_OP_CONV, &r, 1) > 0);
    r = conv;
    r.pattern = QF_QPAT_NONE; /* an entry nothing reaches */
    CHECK(row_problems(QF_OP_CONV, &r, 1) > 0);
    r = (qf_op_quant){.pattern = QF_QPAT_FIXED};
    CHECK(row_problems(QF_OP_SIGMOID, &r, 1) > 0);
    r = qadd;
    r.qparams_slot = 7; /* QADD has 8 inputs: 7 and 8 do not both exist */
    CHECK(row_problems(QF_OP_QADD, &r, 1) > 0);
    r = (qf_op_quant){0};
    CHECK(row_problems(QF_OP_CONV, &r, 1) > 0); /* neutron names Conv */
}

int main(void)
{
    RUN(test_real_rows);
    RUN(test_broken_rows);
    return qf_check_report();
}
