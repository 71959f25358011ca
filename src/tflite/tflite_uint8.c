/* uint8 QDQ models (ONNX Runtime's quantize_static writes uint8 activations
 * by default) made int8 on the export's private copy, exactly: a uint8 value
 * q of zero point z means (q - z) * s, which is the int8 value q - 128 of
 * zero point z - 128. So every QuantizeLinear / DequantizeLinear with a
 * uint8 zero point gets the int8 zero point z - 128 (its output, resp.
 * input, becomes int8 when shapes are inferred again), and a DQ's uint8
 * constant (weights, a constant operand) becomes the int8 constant q - 128.
 * TFLite's int8 weights are symmetric: uint8 weights map to them only with
 * zero point 128 (every channel's); others are refused naming the node.
 * A uint8 graph input or output is refused (the interface is int8 or float).
 */
#include <stdio.h>
#include <string.h>

#include "tflite_build.h"

static bool is_u8_const(const qf_value *v) { return v && qf_value_is_const(v) && v->type.dtype == QF_DTYPE_U8; }

/* A weight slot: input 1 of a Conv, ConvTranspose, Gemm or MatMul. */
static bool feeds_weight(const qf_value *v)
{
    for (int i = 0; i < v->nuses; i++) {
        const qf_node *u = v->uses[i].node;
        if (v->uses[i].slot == 1 && (u->op == QF_OP_CONV || u->op == QF_OP_CONV_TRANSPOSE || u->op == QF_OP_GEMM ||
                                      u->op == QF_OP_MATMUL || u->op == QF_OP_LINEAR))
            return true;
    }
    return false;
}

/* A new int8 constant of v's shape holding v's uint8 values - 128, named
 * after v; NULL on out-of-memory. */
static qf_value *shifted(qf_graph *g, const qf_value *v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_I8, v->type.ndim, v->type.dims) != QF_OK) return NULL;
    const uint8_t *s = v->type.data;
    int8_t *d = t.data;
    for (int64_t i = 0, n = qf_tensor_numel(&v->type); i < n; i++) d[i] = (int8_t)((int)s[i] - 128);
    char name[512];
    snprintf(name, sizeof name, "%.480s_s8", v->name);
    qf_value *k = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!k) qf_tensor_free(&t);
    return k;
}

qf_status qf_tfl_uint8_to_int8(qf_graph *g)
{
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i]->type.dtype == QF_DTYPE_U8)
            return qf_error(QF_ERR_UNSUPPORTED, "tflite export: input '%s' is uint8 (give the model a float or "
                            "int8 input)", g->inputs[i]->name);
    for (qf_node *n = g->first; n; n = n->next) {
        if ((n->op != QF_OP_QUANTIZE && n->op != QF_OP_DEQUANTIZE) || n->ninputs < 3 || !is_u8_const(n->inputs[2]))
            continue;
        const qf_value *zp = n->inputs[2];
        if (n->op == QF_OP_QUANTIZE && n->outputs[0]->is_output)
            return qf_error(QF_ERR_UNSUPPORTED, "tflite export: node '%s' (QuantizeLinear): its uint8 output '%s' is "
                            "a graph output (the export's outputs are int8 or float)", n->name, n->outputs[0]->name);
        if (n->op == QF_OP_DEQUANTIZE && is_u8_const(n->inputs[0]) && feeds_weight(n->outputs[0])) {
            const uint8_t *z = zp->type.data;
            for (int64_t i = 0, k = qf_tensor_numel(&zp->type); i < k; i++)
                if (z[i] != 128)
                    return qf_error(QF_ERR_UNSUPPORTED, "tflite export: node '%s' (DequantizeLinear): uint8 weights "
                                    "'%s' with zero point %d have no TFLite form (int8 weights are symmetric: "
                                    "only zero point 128 maps to them)", n->name, n->inputs[0]->name, (int)z[i]);
        }
        qf_value *nz = shifted(g, zp);
        if (!nz) return QF_ERR_NOMEM;
        QF_TRY(qf_node_set_input(g, n, 2, nz));
        if (n->op == QF_OP_DEQUANTIZE && is_u8_const(n->inputs[0])) {
            qf_value *nx = shifted(g, n->inputs[0]);
            if (!nx) return QF_ERR_NOMEM;
            QF_TRY(qf_node_set_input(g, n, 0, nx));
        }
        if (n->op == QF_OP_QUANTIZE) n->outputs[0]->type.dtype = QF_DTYPE_I8;
    }
    return QF_OK;
}
