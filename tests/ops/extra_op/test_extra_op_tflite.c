/* The made-up op square_plus's TFLite mapping (one row, QF_EXTRA_TFLITE_ROWS
 * in qf_test_extra_ops.h, and one emitter, square_plus_tflite.c): a QDQ
 * graph
 *
 *   x float [1, 3, 2, 2] -> Q -> DQ -> SquarePlus(bias 0.5) -> Q -> DQ -> y
 *
 * exports to one CUSTOM operator "SquarePlus" from the int8 input to the
 * int8 output, which the report shows; the file is written to argv[1] for
 * square_plus_tflite_test.py, which reads it back with the schema's Python
 * reader (operator code, custom code, custom options, tensors, qparams,
 * layout). A SquarePlus whose output is not requantized is refused, naming
 * the node and its op. */
#include <string.h>

#include "qfold/tflite.h"
#include "tools/qf_check.h"

static qf_value *scalar(qf_graph *g, const char *name, qf_dtype dt, const void *v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, 0, NULL) != QF_OK) return NULL;
    memcpy(t.data, v, qf_tensor_nbytes(&t));
    qf_value *c = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!c) qf_tensor_free(&t);
    return c;
}

/* v -> QuantizeLinear / DequantizeLinear (scale s, int8 zero point z); output renamed `out`. */
static qf_value *qdq(qf_graph *g, qf_op op, const char *name, const char *out, qf_value *v, float s,
                     int8_t z)
{
    char sn[64], zn[64];
    snprintf(sn, sizeof sn, "%s_s", name);
    snprintf(zn, sizeof zn, "%s_z", name);
    qf_value *in[3] = {v, scalar(g, sn, QF_DTYPE_F32, &s), scalar(g, zn, QF_DTYPE_I8, &z)};
    REQUIRE(v && in[1] && in[2], "building %s: %s", name, qf_error_message());
    qf_node *n = qf_graph_add_node(g, op, name, 3, in, 1);
    REQUIRE(n != NULL, "building %s", name);
    REQUIRE_OK(qf_graph_rename_value(g, n->outputs[0], out));
    return n->outputs[0];
}

/* The graph of the top; `requant`: false leaves SquarePlus's output in float. */
static qf_graph *square_plus_graph(bool requant)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t xd[4] = {1, 3, 2, 2};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_value *xq = qdq(g, QF_OP_QUANTIZE, "q_in", "x_q", x, 0.05f, -3);
    qf_value *xf = qdq(g, QF_OP_DEQUANTIZE, "dq_in", "x_dq", xq, 0.05f, -3);
    qf_node *sq = qf_graph_add_node(g, QF_OP_SQUARE_PLUS, "sq", 1, &xf, 1);
    REQUIRE(sq != NULL, "square_plus");
    REQUIRE_OK(qf_node_set_attr_float(g, sq, "bias", 0.5f));
    REQUIRE_OK(qf_graph_rename_value(g, sq->outputs[0], "sp"));
    qf_value *y = sq->outputs[0];
    if (requant) {
        qf_value *yq = qdq(g, QF_OP_QUANTIZE, "q_out", "y_q", y, 0.1f, -100);
        y = qdq(g, QF_OP_DEQUANTIZE, "dq_out", "y", yq, 0.1f, -100);
    }
    REQUIRE_OK(qf_graph_add_output(g, y));
    REQUIRE_OK(qf_graph_toposort(g));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

static const char *out_path;

static void test_custom_op(void)
{
    qf_graph *g = square_plus_graph(true);
    qf_tflite_result r;
    REQUIRE_OK(qf_tflite_save(g, out_path, NULL, &r));
    CHECK(r.nops == 1);
    if (r.nops == 1) {
        CHECK(strcmp(r.ops[0].op, "CUSTOM") == 0);
        CHECK(strcmp(r.ops[0].node, "sq") == 0);
        CHECK(strcmp(r.ops[0].output, "y_q") == 0);
        CHECK(r.ops[0].ninputs == 1 && r.ops[0].noutputs == 1);
        CHECK(r.ops[0].macs == 12);
        /* NHWC */
        CHECK(r.ops[0].in_ndim[0] == 4 && r.ops[0].in_shape[0][3] == 3 &&
              r.ops[0].out_shape[0][1] == 2);
    }
    CHECK(r.ntensors == 2 && r.weight_bytes == 0);
    qf_tflite_result_free(&r);
    qf_graph_free(g);
}

static void test_refusal(void)
{
    qf_graph *g = square_plus_graph(false);
    qf_tflite_result r;
    CHECK_ERR(qf_tflite_export(g, NULL, &r), QF_ERR_UNSUPPORTED,
              "node 'sq' (SquarePlus): computed in float");
    qf_graph_free(g);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.tflite\n", argv[0]);
        return 2;
    }
    out_path = argv[1];
    RUN(test_custom_op);
    RUN(test_refusal);
    return qf_check_report();
}
