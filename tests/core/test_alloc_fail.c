/* Allocation-failure injection (the Lua habit): the allocation hook fails
 * at the N-th allocation, for N = 1 .. the number a clean run makes, in two
 * modes (only that allocation fails; it and every later one fail). Each
 * failure must come back as QF_ERR_NOMEM, never as a crash, a different
 * status or a silently wrong result, and every block allocated through the
 * hook must be freed afterwards (checked by counting, so this holds even
 * where LeakSanitizer cannot run).
 *
 *   test_alloc_fail MODEL.onnx INPUT.npy WORKDIR
 *
 * Phase "api" builds and rewrites a graph through the IR calls; phase "io"
 * loads MODEL, reads INPUT, plans and runs it, writes the output .npy and
 * saves the model to WORKDIR (a failed save must leave no file behind).
 */
#include <dirent.h>
#include <unistd.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "tools/qf_check.h"

static qf_check_alloc alloc;
static const char *model_path, *input_path, *workdir;

/* --- phase api ------------------------------------------------------------ */
static qf_status phase_api(qf_tensor *result)
{
    (void)result;
    qf_graph *g = NULL;
    qf_status st = qf_graph_init(&g);
    if (st) return st;
    int64_t d[] = {2, 8};
    qf_tensor t = {0};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_node *prev = NULL;
    st = QF_ERR_NOMEM;
    if (!x) goto out;
    qf_value *cur = x;
    char name[32];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "relu%d", i);
        prev = qf_graph_add_node(g, QF_OP_RELU, name, 1, &cur, 1);
        if (!prev) goto out;
        if ((st = qf_node_set_attr_int(g, prev, "k", i)) != QF_OK) goto out;
        if ((st = qf_node_set_attr_floats(g, prev, "f", (const float[]){1, 2}, 2)) != QF_OK) goto out;
        cur = prev->outputs[0];
        st = QF_ERR_NOMEM;
    }
    if ((st = qf_tensor_init(&t, QF_DTYPE_F32, 2, d)) != QF_OK) goto out;
    qf_value *c = qf_graph_add_constant(g, "c", QF_VALUE_CONSTANT, &t);
    if (!c) goto out;
    qf_value *in[2] = {cur, c};
    qf_node *add = qf_graph_add_node(g, QF_OP_ADD, "add", 2, in, 1);
    if (!add) goto out;
    if ((st = qf_graph_add_output(g, add->outputs[0])) != QF_OK) goto out;
    /* A second reader of every other value, then rewire it away (dce). */
    qf_node *dead = qf_graph_add_node(g, QF_OP_RELU, "dead", 1, &x, 1);
    if (!dead) {
        st = QF_ERR_NOMEM;
        goto out;
    }
    if ((st = qf_graph_replace_uses(g, prev->outputs[0], x)) != QF_OK) goto out;
    qf_graph_dce(g);
    if ((st = qf_graph_toposort(g)) != QF_OK) goto out;
    st = qf_graph_verify(g);
out:
    qf_tensor_free(&t);
    qf_graph_free(g);
    return st;
}

/* --- phase io ------------------------------------------------------------- */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static qf_status phase_io(qf_tensor *result)
{
    qf_graph *g = NULL;
    qf_plan *p = NULL;
    qf_tensor x = {0}, y = {0};
    char out_npy[4096], out_onnx[4096];
    snprintf(out_npy, sizeof out_npy, "%s/out.npy", workdir);
    snprintf(out_onnx, sizeof out_onnx, "%s/saved.onnx", workdir);
    int before = dir_entries(workdir);

    qf_status st = qf_onnx_load(model_path, &g);
    if (st) goto out;
    if ((st = qf_npy_load(input_path, &x)) != QF_OK) goto out;
    if ((st = qf_graph_set_input_shape(g, 0, x.ndim, x.dims)) != QF_OK) goto out;
    if ((st = qf_plan_init(&p, g)) != QF_OK) goto out;
    const qf_tensor *feed[1] = {&x};
    if ((st = qf_plan_run(p, feed, 1)) != QF_OK) goto out;
    if ((st = qf_tensor_copy(&y, qf_plan_output(p, 0))) != QF_OK) goto out;
    if ((st = qf_npy_save(out_npy, &y)) != QF_OK) goto out;
    if ((st = qf_onnx_save(g, out_onnx)) != QF_OK) goto out;
    *result = y;
    memset(&y, 0, sizeof y);
out:
    qf_plan_free(p);
    qf_graph_free(g);
    qf_tensor_free(&x);
    qf_tensor_free(&y);
    /* A failed write leaves nothing (no truncated file, no temporary). */
    if (st != QF_OK && access(out_onnx, F_OK) == 0) {
        fprintf(stderr, "  a failed run left %s behind\n", out_onnx);
        st = QF_ERR_INTERNAL;
    }
    unlink(out_npy);
    unlink(out_onnx);
    if (dir_entries(workdir) != before) {
        fprintf(stderr, "  files left behind in %s\n", workdir);
        if (st == QF_OK || st == QF_ERR_NOMEM) st = QF_ERR_INTERNAL;
    }
    return st;
}

/* --- the driver ----------------------------------------------------------- */
static int same_tensor(const qf_tensor *a, const qf_tensor *b)
{
    return a->dtype == b->dtype && qf_shape_equal(a->ndim, a->dims, b->ndim, b->dims) &&
           (qf_tensor_nbytes(a) == 0 || memcmp(a->data, b->data, qf_tensor_nbytes(a)) == 0);
}

static void inject(const char *phase, qf_status (*fn)(qf_tensor *))
{
    qf_tensor ref = {0};
    qf_check_count_allocs(&alloc);
    qf_status st = fn(&ref);
    long total = alloc.calls;
    long leaked = alloc.live - (ref.data ? 1 : 0);
    qf_set_allocator(NULL, NULL);
    if (st != QF_OK) {
        printf("FAIL %s: clean run fails: %s: %s\n", phase, qf_status_name(st), qf_error_message());
        qf_check_failed++;
        qf_tensor_free(&ref);
        return;
    }
    if (leaked) {
        printf("FAIL %s: clean run leaves %ld blocks allocated\n", phase, leaked);
        qf_check_failed++;
    }
    long bad = 0, nomem = 0, recovered = 0;
    for (int persistent = 0; persistent <= 1; persistent++) {
        for (long n = 1; n <= total; n++) {
            qf_tensor got = {0};
            qf_check_count_allocs(&alloc);
            alloc.fail_at = n;
            alloc.persistent = persistent;
            qf_error_clear();
            st = fn(&got);
            long live = alloc.live - (got.data ? 1 : 0);
            int problem = 0;
            if (st == QF_ERR_NOMEM) {
                nomem++;
            } else if (st == QF_OK) {
                recovered++;
                if (!same_tensor(&got, &ref) && ref.data) {
                    printf("  %s: allocation %ld failed%s, run succeeded with a different result\n",
                           phase, n, persistent ? " (and all later)" : "");
                    problem = 1;
                }
            } else {
                printf("  %s: allocation %ld failed%s: got %s (%s), expected out of memory\n", phase,
                       n, persistent ? " (and all later)" : "", qf_status_name(st), qf_error_message());
                problem = 1;
            }
            if (live != 0) {
                printf("  %s: allocation %ld failed%s: %ld blocks leaked\n", phase, n,
                       persistent ? " (and all later)" : "", live);
                problem = 1;
            }
            qf_tensor_free(&got);
            qf_set_allocator(NULL, NULL);
            bad += problem;
            if (bad > 20) break;
        }
    }
    /* ref's data came from the counting hook, which uses malloc: freeing it
     * through the default hook (free) is correct. */
    qf_tensor_free(&ref);
    printf("%s %s: %ld allocations, %ld injected failures -> %ld out of memory, %ld recovered, %ld bad\n",
           bad ? "FAIL" : "PASS", phase, total, 2 * total, nomem, recovered, bad);
    if (bad) qf_check_failed++; else qf_check_passed++;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_alloc_fail MODEL.onnx INPUT.npy WORKDIR\n");
        return 2;
    }
    model_path = argv[1];
    input_path = argv[2];
    workdir = argv[3];
    inject("api", phase_api);
    inject("io", phase_io);
    return qf_check_report();
}
