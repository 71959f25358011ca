/* Private to the CLI: fuse --verify (src/cli/fuse_verify.c). */
#ifndef QF_CLI_FUSE_VERIFY_H
#define QF_CLI_FUSE_VERIFY_H

#include "qfold/exec.h"

/* One --verify-data: NAME=X.npy (name set) or X.npy (name "": the
 * model's only input). */
typedef struct qf_verify_data {
    char name[256];
    const char *path;
} qf_verify_data;

/* Run the model at `in` and the written one at `written` on the same inputs
 * (the given arrays; the other inputs generated at sizes the model accepts)
 * and compare every output into *res. QF_ERR_MISMATCH (exit 1) when the
 * model cannot be verified (an op qfold cannot run, no input size found),
 * with a message that says what to give with --verify-data. */
qf_status qf_fuse_verify_run(const char *in, const char *written, const qf_verify_data *vd, int nvd,
                             double tol, qf_compare_result *res);

#endif
