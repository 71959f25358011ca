/* qfold — deployment targets: what runs on the NPU, and why not.
 *
 * A target is a set of delegation rules (one row per op, src/target/) and
 * the parameters they read. The first target is NXP's eIQ Neutron NPU, with
 * the rules of ExecuTorch's NXP backend (its node converters'
 * _is_supported_in_IR / _is_supported_on_target and the partitioner's
 * supports_partitioning_result), in two generations: the eIQ Neutron SDK 3.x
 * rules (the default) and the older SDK 2.x ones (the "multiple of num_macs"
 * rules).
 *
 *   qf_target_spec t;
 *   QF_TRY(qf_target_spec_init(&t, "neutron"));       // Neutron-C, 8 MACs, 8 pipes, sdk3
 *   QF_TRY(qf_target_spec_set(&t, "neutron-flow=sdk2"));
 *   qf_check_result r;
 *   QF_TRY(qf_target_check(g, &t, &r));               // float or QDQ model
 *   qf_check_print(&r, stdout);
 *   qf_check_result_free(&r);
 */
#ifndef QFOLD_TARGET_H
#define QFOLD_TARGET_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qfold/graph.h"
#include "qfold/status.h"
#include "qfold/tflite.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qf_neutron_flow {
    QF_NEUTRON_SDK3 = 0, /* eIQ Neutron SDK 3.x (ExecuTorch HEAD): most limits lifted */
    QF_NEUTRON_SDK2      /* Neutron SW 2.2.x (ExecuTorch v1.3.0 and earlier) */
} qf_neutron_flow;

typedef struct qf_target_spec {
    const char *name;     /* "neutron" */
    qf_neutron_flow flow;
    int num_macs;         /* MACs per pipe (Neutron-C in the i.MX RT700: 8) */
    int num_pipes;        /* 8 */
    bool neutron_passes;  /* a float model: quantized with the Neutron passes
                           * (quantize's neutron-passes rule; default on) */
} qf_target_spec;

/* The defaults of target `name` ("neutron"); QF_ERR_INVALID naming the known
 * targets otherwise. */
qf_status qf_target_spec_init(qf_target_spec *t, const char *name);
/* One KEY=VALUE (`--set`): neutron-flow=sdk3|sdk2, num-macs=N, num-pipes=N,
 * neutron-passes=on|off (a float model only: quantized as `quantize --set
 * neutron-passes=...` does).
 * QF_ERR_INVALID naming the key and its values. */
qf_status qf_target_spec_set(qf_target_spec *t, const char *rule);
/* The names of the targets, NULL-terminated. */
const char *const *qf_target_names(void);

typedef enum qf_placement { QF_PLACE_NPU = 0, QF_PLACE_CPU } qf_placement;

/* One node of the checked model (every node appears once, in the model's
 * order, under its ONNX name). */
typedef struct qf_check_node {
    const char *name;      /* the node's name in the checked model */
    const char *op;        /* its ONNX op_type */
    qf_placement placement;
    const char *rule;      /* CPU: the rule that failed, in words ("kh*kw*ceil(Cin, 8) = 65664 > 65535"); else NULL */
    const char *fix;       /* CPU: a concrete change that would make it run on the NPU, or NULL */
    const char *note;      /* what qfold does to it first ("split into 4 convolutions", "folded into Conv 'c1'"), or NULL */
    int partition;         /* index in partitions (NPU nodes), -1 on the CPU */
    bool qdq;              /* a QuantizeLinear / DequantizeLinear (or a computation on constants alone): placed with the node it serves, not counted */
    int64_t macs;          /* multiply-accumulates per inference (the model's batch; dynamic as 1) */
    int64_t macs_padded;   /* the MACs the NPU spends on it, channels rounded up to num_macs (>= macs) */
} qf_check_node;

typedef struct qf_check_result {
    qf_target_spec target;
    bool from_float;       /* the model was float: checked as `quantize --target` would quantize it */
    qf_check_node *nodes;
    int nnodes;
    int **partitions;      /* partitions[p]: indices into nodes, npart_len[p] of them */
    int *partition_len;
    int npartitions;
    int npu_nodes, cpu_nodes; /* compute nodes (qdq ones not counted) */
    int64_t macs_total, macs_npu, macs_npu_padded;
    double npu_mac_fraction; /* macs_npu / macs_total (1 when the model has no MACs and every node is on the NPU) */
    int transitions;       /* NPU <-> CPU edges between consecutive placements along data edges */
    struct qf_arena *arena; /* the strings above */
} qf_check_result;

/* Check g (not modified) for target t: float models as `quantize --target`
 * would quantize them (on synthetic calibration data: the placement does not
 * depend on the data), QDQ models as they are. QF_ERR_INVALID /
 * QF_ERR_UNSUPPORTED only for a model that cannot be checked at all (naming
 * the node); an op the target cannot take is a CPU placement, not an error. */
qf_status qf_target_check(const qf_graph *g, const qf_target_spec *t, qf_check_result *r);
void qf_check_result_free(qf_check_result *r);

/* The JSON report: {"target": {...}, "from_float", "nodes": [{"name", "op",
 * "placement", "rule", "fix", "note", "partition", "macs"}], "partitions":
 * [[names]], "summary": {"npu_nodes", "cpu_nodes", "npu_mac_fraction",
 * "transitions", "macs", "npu_macs", "npu_macs_padded"}}. *json from
 * qf_malloc. */
qf_status qf_check_report_json(const qf_check_result *r, char **json, size_t *len);
/* Graphviz DOT of g coloured by placement (g: the model r was made from). */
qf_status qf_check_report_dot(const qf_check_result *r, const qf_graph *g, char **dot, size_t *len);
/* The human table (nodes grouped by partition) and the summary line. */
void qf_check_print(const qf_check_result *r, FILE *f);
/* The summary line alone: "NPU: x of y ops, z % of MACs, k partitions, t transitions". */
void qf_check_print_summary(const qf_check_result *r, FILE *f);

/* The deployment report of `export --target` (src/target/deploy_report.c):
 * the TFLite export's report (qf_tflite_report_json: same text, members
 * added) with each TFLite op placed as its ONNX node was by the check c (run
 * on the graph tr was exported from; an op the export adds, such as a
 * TRANSPOSE, names the node it serves). Per op: "placement" ("npu" / "cpu"),
 * "rule" and "fix" (CPU), "note", "partition" (NPU) and "macs_padded" (NPU:
 * the op's MACs scaled by its node's macs_padded / macs); at the top
 * "placement": {"target", "ops", "npu_ops", "cpu_ops", "macs", "npu_macs",
 * "cpu_macs" (npu_macs + cpu_macs = macs = totals.macs), "npu_mac_fraction",
 * "npu_macs_padded", "padding_macs", "npu_mac_utilisation" (npu_macs /
 * npu_macs_padded), "check": {"from_float", "npu_nodes", "cpu_nodes",
 * "partitions", "transitions"}}. max_lsb as qf_tflite_report_json's. */
qf_status qf_target_report_json(const qf_tflite_result *tr, const double *max_lsb, const qf_check_result *c,
                                char **json, size_t *len);
/* The line `export --target` adds to its summary: "neutron: NPU: x of y ops,
 * z % of MACs, MAC utilisation u % (channels padded to multiples of
 * num_macs); p partitions, t transitions" (ops: TFLite ops; u: npu_macs /
 * npu_macs_padded, left out when the NPU has no MACs). */
qf_status qf_target_report_print(const qf_tflite_result *tr, const qf_check_result *c, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
