/* The op table and the op schema, walked: every op of QF_OP_LIST has a
 * schema row (name, sane arity, roles within the arity, attributes), shape
 * inference and a float forward kernel; a prepare column comes with its
 * state size. The checker runs on the real table (no problem allowed) and on
 * broken copies (each must be caught), so this test can fail. The C types of
 * the columns make every filled column a function of the right signature. */
#include <stdio.h>
#include <string.h>

#include "ops/op_table.h"
#include "qfold/schema.h"
#include "tools/qf_check.h"

/* Problems of op `op` given its kernel columns k (printed unless quiet). */
static int op_problems(qf_op op, const qf_op_kernels *k, int quiet)
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
    if (!s || !s->name || !*s->name) {
        PROBLEM("no schema row");
        return bad;
    }
    if (strcmp(s->name, qf_op_name(op)) != 0 || qf_op_from_name(s->name) != op) PROBLEM("name look-up broken");
    if (s->onnx_name && qf_op_from_onnx(s->onnx_name) != op) PROBLEM("ONNX name '%s' not unique", s->onnx_name);
    if (!s->onnx_domain) PROBLEM("no ONNX domain");
    if (s->min_inputs < 0 || (s->max_inputs >= 0 && s->max_inputs < s->min_inputs)) PROBLEM("input arity");
    if (s->min_outputs < 1 || (s->max_outputs >= 0 && s->max_outputs < s->min_outputs)) PROBLEM("output arity");
    for (int i = s->max_inputs >= 0 ? s->max_inputs : QF_MAX_ROLES; i < QF_MAX_ROLES; i++)
        if (s->roles[i] != QF_ROLE_DATA) PROBLEM("role for input %d past max_inputs %d", i, s->max_inputs);
    for (int i = 0; i < QF_MAX_ROLES; i++)
        if ((unsigned)s->roles[i] > QF_ROLE_SHAPE) PROBLEM("role %d out of range", i);
    for (int a = 0; s->attrs[a].name; a++) {
        if ((unsigned)s->attrs[a].type > QF_ATTR_TENSOR) PROBLEM("attribute '%s' type", s->attrs[a].name);
        for (int b = 0; b < a; b++)
            if (strcmp(s->attrs[a].name, s->attrs[b].name) == 0) PROBLEM("attribute '%s' twice", s->attrs[a].name);
    }
    if (!k) {
        PROBLEM("no kernel columns");
        return bad;
    }
    if (!k->infer) PROBLEM("no shape inference");
    /* opaque stands for an op qfold cannot run: it has no kernel by design. */
    if (!k->forward_f32 && op != QF_OP_OPAQUE) PROBLEM("no float forward kernel");
    if (!k->prepare != !k->state_size) PROBLEM("prepare %s but state_size %zu", k->prepare ? "set" : "unset", k->state_size);
#undef PROBLEM
    return bad;
}

static int table_problems(const qf_op_kernels *const *table, int quiet)
{
    int bad = 0;
    for (int op = 0; op < QF_OP_COUNT; op++) bad += op_problems((qf_op)op, table[op], quiet);
    return bad;
}

static void test_real_table(void)
{
    CHECK(table_problems(qf_op_table, 0) == 0);
    CHECK(qf_op_schema_get(QF_OP_COUNT) == NULL);
    CHECK(qf_op_input_role(QF_OP_CONV, 1) == QF_ROLE_WEIGHT);
    CHECK(qf_op_input_role(QF_OP_CONV, 7) == QF_ROLE_DATA);
    CHECK(qf_op_schema_attr(QF_OP_CONV, "group") && qf_op_schema_attr(QF_OP_CONV, "group")->type == QF_ATTR_INT);
    CHECK(qf_op_schema_attr(QF_OP_RELU, "group") == NULL);
}

/* A broken copy of the table must be caught, column by column. */
static void test_broken_tables(void)
{
    static const qf_op_kernels *table[QF_OP_COUNT];
    qf_op_kernels k;
    memcpy(table, qf_op_table, sizeof table);

    k = *qf_op_table[QF_OP_RELU];
    k.infer = NULL;
    table[QF_OP_RELU] = &k;
    CHECK(table_problems(table, 1) == 1);

    k = *qf_op_table[QF_OP_RELU];
    k.forward_f32 = NULL;
    CHECK(table_problems(table, 1) == 1);

    k = *qf_op_table[QF_OP_CONV];
    table[QF_OP_RELU] = qf_op_table[QF_OP_RELU];
    table[QF_OP_CONV] = &k;
    k.state_size = k.state_size ? 0 : 16;
    CHECK(table_problems(table, 1) == 1);

    table[QF_OP_CONV] = NULL;
    CHECK(table_problems(table, 1) == 1);
}

int main(void)
{
    RUN(test_real_table);
    RUN(test_broken_tables);
    return qf_check_report();
}
