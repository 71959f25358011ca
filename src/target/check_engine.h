/* The check engine's state, shared by its two files (src/target/): check.c
 * (the engine: classification, views, verdicts, partitions, MACs, the
 * result) and check_model.c (the entry points; a float model quantized
 * first, its nodes reported under the original model's names). Private to
 * the target layer. */
#ifndef QF_TARGET_CHECK_ENGINE_H
#define QF_TARGET_CHECK_ENGINE_H

#include "core/arena.h"
#include "neutron.h"
#include "qfold/quant.h"
#include "qfold/target.h"

typedef enum ck_kind {
    CK_COMPUTE = 0, /* has a row (or should have one) */
    CK_QDQ,         /* Q / DQ of a compute node's cluster */
    CK_FUSED,       /* activation fused into its producer's cluster */
    CK_BOUNDARY,    /* Q of a float graph input, DQ to a float graph output */
    CK_CONST /* computes from constants only (Constant, Shape of a weight): placed with its reader */
} ck_kind;

typedef struct qf_ck {
    const qf_graph *g;
    const qf_target_spec *t;
    int n;
    const qf_node **node; /* by index, graph order */
    int *index;           /* node id -> index */
    ck_kind *kind;
    int *owner;     /* QDQ / FUSED: the compute node; COMPUTE: itself; BOUNDARY: -1 */
    int *fused;     /* COMPUTE: its fused activation, -1 none */
    qf_nview *view; /* COMPUTE */
    bool *ok;       /* COMPUTE: the row said yes */
    bool *dnd;      /* COMPUTE: refused by a partition rule */
    qf_nwhy *why;
    int *part; /* COMPUTE: partition (-1 CPU) */
    int npart;
    int **succ; /* COMPUTE: successor compute nodes (distinct) */
    int *nsucc;
    int64_t *macs, *macs_padded;
    int *wstack, *wmark, wepoch; /* scratch of ck_successors */
    qf_arena arena;
} qf_ck;

/* check.c: run the engine on the QDQ graph g (c zeroed first; ck_free
 * releases it, also after a failure); the result of a QDQ model; */
qf_status ck_run(qf_ck *c, const qf_graph *g, const qf_target_spec *t);
void ck_free(qf_ck *c);
qf_status ck_result_qdq(const qf_ck *c, qf_check_result *r);
/* the placement of node i of the checked graph (its owner's); an
 * arena copy of s (NULL for NULL or ""); whether `piece` is named
 * "<name>_..." (a node a pass made of node `name`); result node k from
 * checked node i under `name`; the summary and partitions of r. */
bool ck_npu(const qf_ck *c, int i);
const char *ck_str(qf_check_result *r, const char *s);
bool ck_piece(const char *name, const char *piece);
qf_status ck_fill(const qf_ck *c, qf_check_result *r, int k, int i, const char *name, const char *op,
                  const char *note);
qf_status ck_summarize(const qf_ck *c, qf_check_result *r);

/* check_model.c: the float model g quantized as `qfold quantize --target`
 * would, read back through ONNX bytes (*out; res: what the quantizer did);
 * the result of the check c of that model, reported under orig's names. */
qf_status ck_quantize(const qf_graph *g, const qf_target_spec *t, qf_graph **out, qf_quantize_model_result *res);
qf_status ck_result_float(const qf_ck *c, const qf_graph *orig, const qf_quantize_model_result *res,
                          qf_check_result *r);

#endif
