/* The engine of `qfold check` (src/target/check.c) on graphs built here,
 * with rule rows of this test's own (the five row tables are defined below,
 * so the library's are not linked in): Conv is taken when its input
 * channels are at most 64 (SDK 3.x) or a multiple of num_macs (SDK 2.x),
 * Relu always but not alone in its partition, Add in SDK 3.x only; every
 * other op has no row.
 *
 *   - the node view: operands through their DQ / Q, static weights,
 *     per-channel axis, int32 bias, the fused activation;
 *   - model-boundary Q / DQ: CPU, not counted;
 *   - no row, no rule for the flow, a node left in float: CPU with the rule;
 *   - partitions around a CPU node (no cycle through it), independent
 *     branches fused as torch's partitioner does, transitions, the
 *     partition rule with its re-partitioning;
 *   - MACs and MACs with channels padded to num_macs;
 *   - a float model: every original node named once, the BatchNorm folded
 *     into the conv with its placement and a note; nodes passes replace
 *     (MatMul + Add as one Gemm, Identity removed, HardSigmoid + Mul as a
 *     HardSwish that keeps the Mul's name) placed with what replaced them;
 *   - the JSON report's keys, the DOT graph, the target's --set keys. */
#include <stdlib.h>
#include <string.h>

#include "qfold/quant.h"
#include "target/neutron.h" /* private: the rows */
#include "tools/qf_check.h"
#include "tools/qf_test_graph.h"

/* --- the test's rows ---------------------------------------------------------- */

/* The last view the Conv rule got, its operands copied (the view lives
 * while the check runs). */
static qf_nview seen_conv;
static qf_nq seen_in[3], seen_out[1];
static int conv_calls;
static int32_t seen_zp0; /* in[0]'s zero point, -999 when it has none */

static bool conv3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    seen_conv = *n;
    for (int k = 0; k < 3 && k < n->nin; k++) seen_in[k] = n->in[k];
    seen_out[0] = n->out[0];
    seen_zp0 = n->in[0].zero_point ? n->in[0].zero_point[0] : -999;
    seen_conv.in = seen_in;
    seen_conv.out = seen_out;
    conv_calls++;
    int64_t cin = n->in[1].v->type.dims[1];
    if (cin > 64)
        return qf_neutron_refuse(why, "use fewer channels", "Cin = %lld > 64", (long long)cin);
    return true;
}
static bool conv2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    int64_t cin = n->in[1].v->type.dims[1];
    if (cin % t->num_macs)
        return qf_neutron_refuse(why, "pad the channels", "Cin = %lld is not a multiple of %d",
                                 (long long)cin, t->num_macs);
    return true;
}
static bool yes(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)n, (void)t, (void)why;
    return true;
}
static int seen_part; /* the compute nodes the last partition rule saw */
static bool not_alone(const qf_nview *n, const qf_npart *p, const qf_target_spec *t, qf_nwhy *why)
{
    (void)n, (void)t;
    seen_part = p->ncompute;
    bool self = false;
    for (int k = 0; k < p->ncompute; k++) self |= p->compute[k] == n->node;
    if (!self) return qf_neutron_refuse(why, NULL, "the partition does not hold the node");
    if (p->ncompute > 1) return true;
    return qf_neutron_refuse(why, NULL, "a Relu alone in its partition runs on the CPU");
}

const qf_neutron_row qf_neutron_rows_conv[] = {{QF_OP_CONV, conv3, conv2, NULL},
                                               {QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_pool[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_binary[] = {{QF_OP_ADD, yes, NULL, NULL},
                                                 {QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_act[] = {{QF_OP_RELU, yes, yes, not_alone},
                                              {QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_shape[] = {{QF_OP_COUNT, NULL, NULL, NULL}};

/* --- graph building ------------------------------------------------------------- */

static uint64_t rng = 0x7a26e7ull;

static qf_value *constant(qf_graph *g, const char *name, qf_dtype dt, int ndim, const int64_t *d)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, ndim, d) != QF_OK) return NULL;
    if (dt == QF_DTYPE_F32)
        for (int64_t i = 0; i < qf_tensor_numel(&t); i++) ((float *)t.data)[i] = 0.05f;
    qf_value *c = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!c) qf_tensor_free(&t);
    return c;
}

/* op(x, scale [ns], zero point [ns] of zdt): a Q or DQ (per channel on axis 0 when ns > 1). */
static qf_value *qnode(qf_graph *g, qf_op op, const char *name, qf_value *x, int64_t ns,
                       qf_dtype zdt)
{
    char b1[96], b2[96];
    snprintf(b1, sizeof b1, "%s_s", name);
    snprintf(b2, sizeof b2, "%s_z", name);
    qf_value *in[3] = {x, constant(g, b1, QF_DTYPE_F32, ns > 1, &ns),
                       constant(g, b2, zdt, ns > 1, &ns)};
    if (!x || !in[1] || !in[2]) return NULL;
    qf_node *n = qf_graph_add_node(g, op, name, 3, in, 1);
    if (n && ns > 1) qf_node_set_attr_int(g, n, "axis", 0);
    return n ? n->outputs[0] : NULL;
}

/* x -> Q -> DQ, named <name>_q / <name>_dq. */
static qf_value *qdq(qf_graph *g, const char *name, qf_value *x)
{
    char q[96], d[96];
    snprintf(q, sizeof q, "%s_q", name);
    snprintf(d, sizeof d, "%s_dq", name);
    return qnode(g, QF_OP_DEQUANTIZE, d, qnode(g, QF_OP_QUANTIZE, q, x, 1, QF_DTYPE_I8), 1,
                 QF_DTYPE_I8);
}

/* A 1x1 Conv of x (cin channels) to cout, int8 per-channel weights and an
 * int32 bias behind DQs; quantized false: float weight and bias. */
static qf_node *conv(qf_graph *g, const char *name, qf_value *x, int64_t cin, int64_t cout,
                     bool quantized)
{
    char b[96];
    const int64_t wd[4] = {cout, cin, 1, 1};
    qf_value *in[3];
    snprintf(b, sizeof b, "%s_w", name);
    if (quantized) {
        in[1] = constant(g, b, QF_DTYPE_I8, 4, wd);
        snprintf(b, sizeof b, "%s_w_dq", name);
        in[1] = qnode(g, QF_OP_DEQUANTIZE, b, in[1], cout, QF_DTYPE_I8);
        snprintf(b, sizeof b, "%s_b", name);
        in[2] = constant(g, b, QF_DTYPE_I32, 1, &cout);
        snprintf(b, sizeof b, "%s_b_dq", name);
        in[2] = qnode(g, QF_OP_DEQUANTIZE, b, in[2], cout, QF_DTYPE_I32);
    } else {
        in[1] = qf_test_const(g, &rng, b, QF_VALUE_PARAMETER, 4, wd, -1, 1);
        snprintf(b, sizeof b, "%s_b", name);
        in[2] = qf_test_const(g, &rng, b, QF_VALUE_PARAMETER, 1, &cout, -1, 1);
    }
    in[0] = x;
    if (!x || !in[1] || !in[2]) return NULL;
    qf_node *n = qf_graph_add_node(g, QF_OP_CONV, name, 3, in, 1);
    const int64_t ks[2] = {1, 1};
    if (n) qf_node_set_attr_ints(g, n, "kernel_shape", ks, 2);
    return n;
}

static qf_node *unary(qf_graph *g, qf_op op, const char *name, qf_value *x)
{
    return x ? qf_graph_add_node(g, op, name, 1, &x, 1) : NULL;
}

/* float x [1, c, 8, 8] -> Q -> DQ: the model's input cluster. */
static qf_value *input(qf_graph *g, int64_t c)
{
    const int64_t d[4] = {1, c, 8, 8};
    return qdq(g, "x", qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d));
}

/* y -> Q -> DQ -> graph output. */
static void output(qf_graph *g, qf_value *y)
{
    qf_value *o = qdq(g, "y", y);
    REQUIRE(o != NULL, "building: %s", qf_error_message());
    REQUIRE_OK(qf_graph_add_output(g, o));
    REQUIRE_OK(qf_graph_toposort(g));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    REQUIRE_OK(qf_graph_verify(g));
}

static const qf_check_node *find(const qf_check_result *r, const char *name)
{
    for (int k = 0; k < r->nnodes; k++)
        if (strcmp(r->nodes[k].name, name) == 0) return &r->nodes[k];
    FAIL("node '%s' not in the result", name);
    return NULL;
}

static qf_target_spec spec(const char *set)
{
    qf_target_spec t;
    qf_target_spec_init(&t, "neutron");
    if (set) qf_target_spec_set(&t, set);
    return t;
}

/* --- tests ------------------------------------------------------------------------ */

/* x -> Q -> DQ -> conv (W, b per channel) -> Relu -> Q -> DQ -> y */
static void test_view_and_fused_activation(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    qf_node *c = conv(g, "conv", input(g, 8), 8, 16, true);
    REQUIRE(c != NULL, "conv: %s", qf_error_message());
    output(g, unary(g, QF_OP_RELU, "relu", c->outputs[0])->outputs[0]);
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    conv_calls = 0;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    CHECK(conv_calls == 1);
    const qf_nview *v = &seen_conv;
    CHECK(v->node == c && v->nin == 3 && v->nout == 1);
    CHECKF(v->in[0].quantized && v->in[0].qtype == QF_DTYPE_I8 && !v->in[0].is_static &&
               v->in[0].axis == -1,
           "in[0]: quantized %d qtype %s static %d axis %d", v->in[0].quantized,
           qf_dtype_name(v->in[0].qtype), v->in[0].is_static, v->in[0].axis);
    CHECK(v->in[0].nscale == 1 && v->in[0].scale && seen_zp0 == 0);
    CHECK(v->in[1].quantized && v->in[1].is_static && v->in[1].qtype == QF_DTYPE_I8);
    CHECKF(v->in[1].axis == 0 && v->in[1].nscale == 16, "weight axis %d, %lld scales",
           v->in[1].axis, (long long)v->in[1].nscale);
    CHECK(v->in[2].quantized && v->in[2].is_static && v->in[2].qtype == QF_DTYPE_I32);
    CHECK(v->out[0].quantized && v->out[0].qtype == QF_DTYPE_I8 && v->out[0].v == c->outputs[0]);
    CHECK(v->fused_act && strcmp(v->fused_act->name, "relu") == 0);
    CHECK(!r.from_float);
    CHECK(r.nnodes == g->nnodes);
    const qf_check_node *e = find(&r, "conv"), *a = find(&r, "relu"), *xq = find(&r, "x_q"),
                        *yd = find(&r, "y_dq");
    const qf_check_node *xd = find(&r, "x_dq"), *wd = find(&r, "conv_w_dq"), *yq = find(&r, "y_q");
    REQUIRE(e && a && xq && yd && xd && wd && yq, "nodes");
    CHECK(e->placement == QF_PLACE_NPU && !e->rule && e->partition == 0 && !e->qdq);
    CHECK(a->placement == QF_PLACE_NPU && a->partition == 0 && a->note &&
          strstr(a->note, "fused into Conv 'conv'"));
    /* the model's float I/O: quantized / dequantized on the CPU, not counted */
    CHECK(xq->qdq && xq->placement == QF_PLACE_CPU && xq->partition == -1 && xq->rule);
    CHECK(yd->qdq && yd->placement == QF_PLACE_CPU && yd->rule);
    /* the cluster's own Q / DQ: with the conv */
    CHECK(xd->qdq && xd->placement == QF_PLACE_NPU && xd->partition == 0);
    CHECK(wd->qdq && wd->placement == QF_PLACE_NPU && yq->qdq && yq->placement == QF_PLACE_NPU);
    CHECKF(r.npu_nodes == 2 && r.cpu_nodes == 0, "npu %d cpu %d", r.npu_nodes, r.cpu_nodes);
    CHECK(r.npartitions == 1 && r.transitions == 0);
    /* 1x1 conv, 8 -> 16 channels on 8x8: 64 * 16 * 8 MACs */
    CHECKF(e->macs == 8192 && e->macs_padded == 8192, "macs %lld padded %lld", (long long)e->macs,
           (long long)e->macs_padded);
    CHECK(r.macs_total == 8192 && r.macs_npu == 8192 && r.npu_mac_fraction == 1.0);
    qf_check_result_free(&r);
    qf_graph_free(g);
}

/* x -> c1 -> Erf -> Add(c1, erf) -> c2 -> y: the Erf has no row (CPU);
 * c1 and the Add cannot share a partition (the path c1 -> Erf -> Add would
 * leave it and come back), the Add and c2 can. */
static void test_partitions_around_cpu(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    qf_node *c1 = conv(g, "c1", input(g, 8), 8, 8, true);
    REQUIRE(c1 != NULL, "c1");
    qf_value *a = qdq(g, "c1o", c1->outputs[0]);
    qf_value *e = qdq(g, "erfo", unary(g, QF_OP_ERF, "erf", a)->outputs[0]);
    qf_value *ain[2] = {a, e};
    qf_node *add = qf_graph_add_node(g, QF_OP_ADD, "add", 2, ain, 1);
    REQUIRE(add != NULL, "add");
    qf_node *c2 = conv(g, "c2", qdq(g, "addo", add->outputs[0]), 8, 4, true);
    REQUIRE(c2 != NULL, "c2");
    output(g, c2->outputs[0]);
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    const qf_check_node *n1 = find(&r, "c1"), *ne = find(&r, "erf"), *na = find(&r, "add"),
                        *n2 = find(&r, "c2");
    REQUIRE(n1 && ne && na && n2, "nodes");
    CHECK(ne->placement == QF_PLACE_CPU && ne->rule &&
          strcmp(ne->rule, "no Neutron converter for Erf") == 0);
    CHECK(ne->partition == -1 && !ne->fix);
    CHECK(n1->placement == QF_PLACE_NPU && na->placement == QF_PLACE_NPU &&
          n2->placement == QF_PLACE_NPU);
    CHECKF(n1->partition != na->partition, "c1 and add in partition %d: a cycle through the Erf",
           n1->partition);
    CHECK(na->partition == n2->partition);
    CHECK(r.npartitions == 2);
    /* partitions in graph order: c1's first */
    CHECK(n1->partition == 0);
    /* c1 -> erf and erf -> add */
    CHECKF(r.transitions == 2, "transitions %d", r.transitions);
    CHECK(r.npu_nodes == 3 && r.cpu_nodes == 1);
    /* the Erf's own Q / DQ follow it to the CPU */
    const qf_check_node *eq = find(&r, "erfo_q");
    CHECK(eq && eq->placement == QF_PLACE_CPU && eq->qdq && eq->rule &&
          strstr(eq->rule, "runs with Erf 'erf'"));
    /* every partition lists its nodes, Q / DQ included */
    int listed = 0;
    for (int p = 0; p < r.npartitions; p++) listed += r.partition_len[p];
    int npu = 0;
    for (int k = 0; k < r.nnodes; k++) npu += r.nodes[k].partition >= 0;
    CHECK(listed == npu);
    qf_check_result_free(&r);
    qf_graph_free(g);
}

/* x -> Erf -> {c1 -> y1, c2 -> y2}: the two convs read the CPU node and
 * nothing else joins them, yet torch's partitioner fuses them into one
 * partition (its "limited horizontal fusion": any two partitions merge
 * unless that creates a cycle). */
static void test_horizontal_fusion(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    qf_value *e = qdq(g, "eo", unary(g, QF_OP_ERF, "erf", input(g, 8))->outputs[0]);
    qf_node *c1 = conv(g, "c1", e, 8, 8, true), *c2 = conv(g, "c2", e, 8, 4, true);
    REQUIRE(c1 && c2, "convs");
    qf_value *y1 = qdq(g, "y1", c1->outputs[0]), *y2 = qdq(g, "y2", c2->outputs[0]);
    REQUIRE(y1 && y2, "outputs");
    REQUIRE_OK(qf_graph_add_output(g, y1));
    REQUIRE_OK(qf_graph_add_output(g, y2));
    REQUIRE_OK(qf_graph_toposort(g));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    const qf_check_node *n1 = find(&r, "c1"), *n2 = find(&r, "c2");
    REQUIRE(n1 && n2, "nodes");
    CHECK(n1->placement == QF_PLACE_NPU && n2->placement == QF_PLACE_NPU);
    CHECKF(n1->partition == 0 && n2->partition == 0 && r.npartitions == 1,
           "partitions %d, %d of %d", n1->partition, n2->partition, r.npartitions);
    CHECKF(r.transitions == 2, "transitions %d", r.transitions); /* erf -> c1, erf -> c2 */
    qf_check_result_free(&r);
    qf_graph_free(g);
}

/* c1 -> Erf -> Relu -> Erf -> y: the Relu alone in its partition goes to the
 * CPU (its partition rule); and the flows: SDK 2.x has no Add, its conv rule
 * differs. */
static void test_partition_rule_and_flows(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    qf_value *x = input(g, 12);
    qf_value *e1 = qdq(g, "e1o", unary(g, QF_OP_ERF, "e1", x)->outputs[0]);
    qf_value *rl = qdq(g, "ro", unary(g, QF_OP_RELU, "lone_relu", e1)->outputs[0]);
    qf_value *e2 = qdq(g, "e2o", unary(g, QF_OP_ERF, "e2", rl)->outputs[0]);
    qf_node *c = conv(g, "c", e2, 12, 8, true);
    REQUIRE(c != NULL, "c");
    output(g, c->outputs[0]);
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    const qf_check_node *n = find(&r, "lone_relu");
    REQUIRE(n != NULL, "relu");
    CHECK(n->placement == QF_PLACE_CPU && n->partition == -1 && n->rule &&
          strcmp(n->rule, "a Relu alone in its partition runs on the CPU") == 0);
    CHECK(find(&r, "c")->placement == QF_PLACE_NPU);
    CHECK(r.npartitions == 1 && r.npu_nodes == 1 && r.cpu_nodes == 3);
    qf_check_result_free(&r);
    /* SDK 2.x: Cin = 12 is not a multiple of 8 */
    t = spec("neutron-flow=sdk2");
    CHECK(t.flow == QF_NEUTRON_SDK2);
    REQUIRE_OK(qf_target_check(g, &t, &r));
    n = find(&r, "c");
    CHECK(n && n->placement == QF_PLACE_CPU && n->rule &&
          strcmp(n->rule, "Cin = 12 is not a multiple of 8") == 0);
    CHECK(n && n->fix && strcmp(n->fix, "pad the channels") == 0);
    CHECK(r.npu_nodes == 0 && r.npartitions == 0 && r.npu_mac_fraction == 0.0);
    qf_check_result_free(&r);
    /* num-macs=4: 12 is a multiple */
    REQUIRE_OK(qf_target_spec_set(&t, "num-macs=4"));
    REQUIRE_OK(qf_target_check(g, &t, &r));
    CHECK(find(&r, "c")->placement == QF_PLACE_NPU);
    /* padded MACs: 12 -> 12 (multiple of 4), 8 -> 8: as computed */
    CHECK(find(&r, "c")->macs == 64 * 12 * 8 && find(&r, "c")->macs_padded == 64 * 12 * 8);
    qf_check_result_free(&r);
    /* num-macs=16: Cin 12 -> 16, Cout 8 -> 16 */
    t = spec("num-macs=16");
    REQUIRE_OK(qf_target_check(g, &t, &r));
    CHECKF(find(&r, "c")->macs_padded == 64 * 16 * 16, "padded %lld",
           (long long)find(&r, "c")->macs_padded);
    CHECK(r.macs_npu_padded == 64 * 16 * 16);
    qf_check_result_free(&r);
    qf_graph_free(g);

    /* a Relu after a conv with a Q / DQ between (not fused): in the conv's
     * partition, so its partition rule lets it stay, and it sees both */
    REQUIRE_OK(qf_graph_init(&g));
    c = conv(g, "c", input(g, 8), 8, 8, true);
    REQUIRE(c != NULL, "c");
    output(g, unary(g, QF_OP_RELU, "relu", qdq(g, "co", c->outputs[0]))->outputs[0]);
    t = spec(NULL);
    REQUIRE_OK(qf_target_check(g, &t, &r));
    n = find(&r, "relu");
    CHECK(n && n->placement == QF_PLACE_NPU && n->partition == 0 && !n->note);
    CHECK(seen_part == 2 && r.npartitions == 1 && r.npu_nodes == 2);
    qf_check_result_free(&r);
    qf_graph_free(g);

    /* an Add in SDK 2.x: no rule in that flow */
    REQUIRE_OK(qf_graph_init(&g));
    x = input(g, 8);
    qf_value *in[2] = {x, x};
    output(g, qf_graph_add_node(g, QF_OP_ADD, "add", 2, in, 1)->outputs[0]);
    t = spec("neutron-flow=sdk2");
    REQUIRE_OK(qf_target_check(g, &t, &r));
    n = find(&r, "add");
    CHECK(n && n->placement == QF_PLACE_CPU && n->rule &&
          strcmp(n->rule, "no Neutron converter for Add in SDK 2.x") == 0);
    qf_check_result_free(&r);
    qf_graph_free(g);
}

/* A conv of a QDQ model left in float (its input not dequantized): CPU. */
static void test_not_quantized(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t d[4] = {1, 8, 8, 8};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_node *c = conv(g, "c", x, 8, 8, false);
    REQUIRE(c != NULL, "c");
    output(g, c->outputs[0]);
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    conv_calls = 0;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    const qf_check_node *n = find(&r, "c");
    CHECK(n && n->placement == QF_PLACE_CPU && n->rule &&
          strstr(n->rule, "not quantized: input 'x'"));
    CHECK(n && n->fix && strstr(n->fix, "qfold quantize --target neutron"));
    CHECK(conv_calls == 0); /* refused before its row is asked */
    qf_check_result_free(&r);
    qf_graph_free(g);
}

/* A float model: x -> conv -> BatchNorm -> Relu -> conv2 -> y. Quantized
 * first; each of its four nodes reported once under its own name, the
 * BatchNorm with the conv's placement and a note. */
static void test_float_model(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t d[4] = {-1, 8, 8, 8};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_node *c = conv(g, "conv", x, 8, 16, false);
    REQUIRE(c != NULL, "conv");
    qf_node *bn = qf_test_bn(g, &rng, "bn", c->outputs[0], 16);
    qf_node *rl = unary(g, QF_OP_RELU, "relu", bn->outputs[0]);
    qf_node *c2 = conv(g, "conv2", rl->outputs[0], 16, 80, false); /* Cin 16: taken */
    qf_node *c3 =
        conv(g, "conv3", c2->outputs[0], 80, 4, false); /* Cin 80 > 64: refused by the test row */
    REQUIRE(c3 != NULL, "conv3");
    REQUIRE_OK(qf_graph_add_output(g, c3->outputs[0]));
    REQUIRE_OK(qf_graph_toposort(g));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    qf_graph_classify_constants(g);
    int before = g->nnodes;
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    CHECK(g->nnodes == before && !qf_graph_is_quantized(g)); /* g is not changed */
    CHECK(r.from_float);
    CHECKF(r.nnodes == 5, "%d nodes", r.nnodes);
    const char *names[5] = {"conv", "bn", "relu", "conv2", "conv3"};
    for (int k = 0; k < 5 && k < r.nnodes; k++)
        CHECKF(strcmp(r.nodes[k].name, names[k]) == 0 && !r.nodes[k].qdq, "node %d '%s'", k,
               r.nodes[k].name);
    const qf_check_node *nc = find(&r, "conv"), *nb = find(&r, "bn"), *nr = find(&r, "relu");
    const qf_check_node *n3 = find(&r, "conv3");
    REQUIRE(nc && nb && nr && n3, "nodes");
    CHECK(strcmp(nb->op, "BatchNormalization") == 0);
    CHECK(nc->placement == QF_PLACE_NPU && nb->placement == QF_PLACE_NPU &&
          nr->placement == QF_PLACE_NPU);
    CHECKF(nb->note && strstr(nb->note, "folded into") && strstr(nb->note, "'conv'"),
           "bn note '%s'", nb->note ? nb->note : "(none)");
    CHECK(nb->partition == nc->partition && nb->macs == 0);
    CHECK(nr->note && strstr(nr->note, "fused into Conv 'conv'"));
    CHECK(n3->placement == QF_PLACE_CPU && n3->rule && strcmp(n3->rule, "Cin = 80 > 64") == 0);
    CHECK(nc->macs == 64 * 16 * 8);
    CHECK(r.npu_nodes == 4 && r.cpu_nodes == 1 && r.transitions == 1 && r.npartitions == 1);
    qf_check_result_free(&r);
    qf_graph_free(g);
}

/* A float model whose nodes passes replace: MatMul + Add (canonicalize's
 * linear: the Add quoted by the MatMul's event), an Identity (removed: its
 * neighbour's placement), HardSigmoid + Mul (one HardSwish that takes the
 * Mul's name; the HardSigmoid's event quotes the Mul). Each reported once,
 * placed with what replaced it. */
static void test_float_names(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t d[2] = {1, 16}, wd[2] = {16, 8}, bd[1] = {8};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_value *mm_in[2] = {x, qf_test_const(g, &rng, "w", QF_VALUE_PARAMETER, 2, wd, -1, 1)};
    qf_node *mm = qf_graph_add_node(g, QF_OP_MATMUL, "mm", 2, mm_in, 1);
    REQUIRE(mm != NULL, "mm");
    qf_value *add_in[2] = {mm->outputs[0],
                           qf_test_const(g, &rng, "b", QF_VALUE_PARAMETER, 1, bd, -1, 1)};
    qf_node *add = qf_graph_add_node(g, QF_OP_ADD, "bias_add", 2, add_in, 1);
    REQUIRE(add != NULL, "add");
    qf_node *id = unary(g, QF_OP_IDENTITY, "ident", add->outputs[0]);
    qf_node *hs = unary(g, QF_OP_HARD_SIGMOID, "hsig", id->outputs[0]);
    REQUIRE(hs != NULL, "hard sigmoid");
    REQUIRE_OK(qf_node_set_attr_float(g, hs, "alpha", 1.0f / 6.0f));
    qf_value *mul_in[2] = {id->outputs[0], hs->outputs[0]};
    qf_node *mul = qf_graph_add_node(g, QF_OP_MUL, "swish_mul", 2, mul_in, 1);
    REQUIRE(mul != NULL, "mul");
    REQUIRE_OK(qf_graph_add_output(g, mul->outputs[0]));
    REQUIRE_OK(qf_graph_toposort(g));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    qf_graph_classify_constants(g);
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    const char *names[5] = {"mm", "bias_add", "ident", "hsig", "swish_mul"};
    CHECKF(r.nnodes == 5, "%d nodes", r.nnodes);
    for (int k = 0; k < 5 && k < r.nnodes; k++)
        CHECKF(strcmp(r.nodes[k].name, names[k]) == 0, "node %d '%s'", k, r.nodes[k].name);
    const qf_check_node *a = find(&r, "bias_add"), *i = find(&r, "ident"), *h = find(&r, "hsig"),
                        *m = find(&r, "swish_mul"), *n = find(&r, "mm");
    REQUIRE(a && i && h && m && n, "nodes");
    /* no Gemm row in the test's tables: the MatMul + Add runs on the CPU as one Gemm */
    CHECKF(n->rule && strcmp(n->rule, "no Neutron converter for Gemm") == 0 &&
               strcmp(n->op, "MatMul") == 0,
           "mm: %s (%s)", n->rule ? n->rule : "-", n->op);
    CHECKF(a->note && strcmp(a->note, "folded into Gemm 'mm'") == 0, "add note '%s'",
           a->note ? a->note : "-");
    CHECKF(a->rule && strstr(a->rule, "runs with Gemm 'mm'"), "add rule '%s'",
           a->rule ? a->rule : "-");
    CHECK(a->macs == 0 && n->macs == 16 * 8);
    CHECKF(i->note && strstr(i->note, "removed"), "identity note '%s'", i->note ? i->note : "-");
    /* fuse_hard_swish gives the HardSwish the Mul's name */
    CHECKF(m->note && strcmp(m->note, "runs as HardSwish 'swish_mul'") == 0, "mul note '%s'",
           m->note ? m->note : "-");
    CHECKF(m->rule && strcmp(m->rule, "no Neutron converter for HardSwish") == 0, "mul rule '%s'",
           m->rule ? m->rule : "-");
    CHECKF(h->note && strstr(h->note, "HardSwish"), "hard sigmoid note '%s'",
           h->note ? h->note : "-");
    CHECKF(h->rule && strstr(h->rule, "runs with HardSwish 'swish_mul'"), "hard sigmoid rule '%s'",
           h->rule ? h->rule : "-");
    CHECKF(n->note && strstr(n->note, "'bias_add'"), "mm note '%s'", n->note ? n->note : "-");
    CHECK(r.cpu_nodes == 5 && r.npu_nodes == 0);
    qf_check_result_free(&r);
    qf_graph_free(g);
}

static void test_reports(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    qf_value *x = input(g, 8);
    qf_value *e = qdq(g, "eo", unary(g, QF_OP_ERF, "erf \"odd\"", x)->outputs[0]);
    qf_node *c = conv(g, "conv", e, 8, 8, true);
    REQUIRE(c != NULL, "conv");
    output(g, c->outputs[0]);
    qf_target_spec t = spec(NULL);
    qf_check_result r;
    REQUIRE_OK(qf_target_check(g, &t, &r));
    char *json = NULL, *dot = NULL;
    size_t len = 0;
    REQUIRE_OK(qf_check_report_json(&r, &json, &len));
    CHECK(len == strlen(json));
    static const char *const keys[] = {
        "\"target\": {\"name\": \"neutron\", \"flow\": \"sdk3\", \"num_macs\": 8, "
        "\"num_pipes\": 8}",
        "\"from_float\": false",
        "\"nodes\": [",
        "\"placement\": \"cpu\"",
        "\"placement\": \"npu\"",
        "\"rule\": \"no Neutron converter for Erf\"",
        "\"fix\": null",
        "\"partitions\": [\n    [",
        "\"summary\": {",
        "\"npu_nodes\": 1",
        "\"cpu_nodes\": 1",
        "\"npu_mac_fraction\": 1.000000",
        "\"transitions\": 1",
        "\"macs\": 4096",
        "\"erf \\\"odd\\\"\""};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        CHECKF(strstr(json, keys[k]), "JSON lacks %s", keys[k]);
    REQUIRE_OK(qf_check_report_dot(&r, g, &dot, &len));
    CHECK(strncmp(dot, "digraph", 7) == 0 && dot[len - 2] == '}');
    CHECK(strstr(dot, "fillcolor=\"#f08a8a\"") && strstr(dot, "fillcolor=\"#8fd18f\""));
    CHECK(strstr(dot, "tooltip=\"no Neutron converter for Erf\""));
    CHECK(strstr(dot, "erf \\\"odd\\\"")); /* quotes escaped */
    CHECK(strstr(dot, "subgraph cluster_p0 {") && !strstr(dot, "cluster_p1"));
    /* the human output */
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    REQUIRE(f != NULL, "memstream");
    qf_check_print(&r, f);
    fclose(f);
    CHECKF(strstr(buf, "NPU partition 0: 1 op") && strstr(buf, "CPU: 1 op") &&
               strstr(buf, "NPU: 1 of 2 ops, 100.0 % of MACs, 1 partition, 1 transition\n"),
           "print:\n%s", buf);
    free(buf);
    qf_free(json);
    qf_free(dot);
    qf_check_result_free(&r);
    qf_graph_free(g);
}

static void test_target_spec(void)
{
    qf_target_spec t;
    REQUIRE_OK(qf_target_spec_init(&t, "neutron"));
    CHECK(strcmp(t.name, "neutron") == 0 && t.flow == QF_NEUTRON_SDK3 && t.num_macs == 8 &&
          t.num_pipes == 8);
    CHECK_OK(qf_target_spec_set(&t, "num-pipes=4"));
    CHECK(t.num_pipes == 4);
    CHECK_OK(qf_target_spec_set(&t, "neutron-flow=sdk2"));
    CHECK_OK(qf_target_spec_set(&t, "neutron-flow=sdk3"));
    CHECK(t.flow == QF_NEUTRON_SDK3);
    CHECK_ERR(qf_target_spec_init(&t, "ethos"), QF_ERR_INVALID, "unknown target 'ethos'");
    CHECK_ERR(qf_target_spec_set(&t, "num-macs=0"), QF_ERR_INVALID, "num-macs takes");
    CHECK_ERR(qf_target_spec_set(&t, "num-macs=8x"), QF_ERR_INVALID, "num-macs takes");
    CHECK_ERR(qf_target_spec_set(&t, "neutron-flow=sdk4"), QF_ERR_INVALID,
              "neutron-flow takes sdk3");
    CHECK_ERR(qf_target_spec_set(&t, "macs=8"), QF_ERR_INVALID, "unknown key 'macs'");
    CHECK_ERR(qf_target_spec_set(&t, "num-macs"), QF_ERR_INVALID, "KEY=VALUE");
    CHECK(t.num_macs == 8);
    const char *const *names = qf_target_names();
    CHECK(names[0] && strcmp(names[0], "neutron") == 0 && !names[1]);
}

int main(void)
{
    RUN(test_target_spec);
    RUN(test_view_and_fused_activation);
    RUN(test_partitions_around_cpu);
    RUN(test_horizontal_fusion);
    RUN(test_partition_rule_and_flows);
    RUN(test_not_quantized);
    RUN(test_float_model);
    RUN(test_float_names);
    RUN(test_reports);
    return qf_check_report();
}
