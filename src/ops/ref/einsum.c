/* Einsum (ONNX opset 12+): Einstein summation over 1..N operands, float32 /
 * float64.
 *
 * The equation is "term,term,...->out" (explicit) or "term,term,..."
 * (implicit: the output is the ellipsis dims, then every letter that occurs
 * exactly once, in ASCII order). A term is letters a-z / A-Z with at most one
 * "..." standing for the dims its label letters do not cover; whitespace is
 * ignored. A letter repeated within one operand takes that operand's
 * diagonal; a letter absent from the output is summed over. Ellipsis dims
 * are right-aligned across operands and broadcast (size 1 against N).
 *
 * Two paths compute it:
 * - a batched GEMM when there are two operands and every label is a batch
 *   label (both operands and the output), an M label (A and the output), an
 *   N label (B and the output) or a K label (both operands, summed). Operands
 *   already laid out [batch, M, K] / [batch, K, M] (and [batch, K, N] /
 *   [batch, N, K] for B) go to qf_sgemm / qf_dgemm as they are, with a transpose
 *   flag; others are packed into scratch first, and an output that is not
 *   [batch, M, N] is computed into scratch and permuted. The attention forms
 *   ("bhid,bhjd->bhij", "bhij,bhjd->bhid") and batch matmuls need no copy.
 * - a generic loop over the output and summed labels, accumulating in
 *   double, for everything else (diagonals, one-sided sums, 3+ operands).
 */
#include <limits.h>
#include <string.h>

#include "ops/math/gemm.h"
#include "ops/kernels.h"

#define ES_LETTERS 52                         /* a-z: 0..25, A-Z: 26..51 */
#define ES_MAX_LABELS (ES_LETTERS + QF_MAX_DIMS) /* + one label per ellipsis dim */
#define ES_MAX_OPS 16
#define ES_ELLIPSIS (-1)

/* The equation resolved against the operand ranks: the label of every dim of
 * every operand, and the output's labels. Ellipsis dim j (of nell, counted
 * from the left of the broadcast ellipsis shape) is label ES_LETTERS + j. */
typedef struct es_spec {
    int nops;
    int ndim[ES_MAX_OPS];
    int lab[ES_MAX_OPS][QF_MAX_DIMS];
    int nout;
    int out[QF_MAX_DIMS];
    int nell;
    int64_t size[ES_MAX_LABELS]; /* -2: label unused, -1: unknown */
} es_spec;

static int es_letter_id(char c)
{
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
    return -1;
}

/* One term ("bij", "...ii") as letter ids with ES_ELLIPSIS for "...". Reads
 * from *p up to ',', '-' or the end. */
static qf_status es_parse_term(const qf_node *n, const char *eq, const char **p, int *ids, int *count)
{
    int k = 0;
    bool ell = false;
    const char *s = *p;
    while (*s && *s != ',' && *s != '-') {
        if (*s == ' ' || *s == '\t') {
            s++;
            continue;
        }
        if (*s == '.') {
            if (s[1] != '.' || s[2] != '.' || ell)
                return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s': a term has a stray '.' or "
                                "more than one '...'", n->name, eq);
            ell = true;
            s += 3;
            if (k >= QF_MAX_DIMS + 1)
                return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Einsum): equation '%s': a term has more than %d "
                                "labels", n->name, eq, QF_MAX_DIMS);
            ids[k++] = ES_ELLIPSIS;
            continue;
        }
        int id = es_letter_id(*s);
        if (id < 0)
            return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s': invalid character '%c'", n->name, eq,
                            *s);
        if (k >= QF_MAX_DIMS + 1)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Einsum): equation '%s': a term has more than %d labels",
                            n->name, eq, QF_MAX_DIMS);
        ids[k++] = id;
        s++;
    }
    *p = s;
    *count = k;
    return QF_OK;
}

/* Parses eq and resolves it against the operand shapes ts[0..nops): labels
 * per dim, ellipsis width, label sizes (checked to agree), output labels. */
static qf_status es_parse(const qf_node *n, const char *eq, int nops, const qf_tensor *const *ts, es_spec *sp)
{
    memset(sp, 0, sizeof *sp);
    for (int l = 0; l < ES_MAX_LABELS; l++) sp->size[l] = -2;
    if (nops > ES_MAX_OPS)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Einsum): %d operands, at most %d are supported", n->name,
                        nops, ES_MAX_OPS);
    sp->nops = nops;
    int terms[ES_MAX_OPS][QF_MAX_DIMS + 1], nterm[ES_MAX_OPS], nlet[ES_MAX_OPS];
    const char *p = eq;
    int t = 0;
    for (;;) {
        if (t >= nops)
            return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s' has more terms than the %d inputs",
                            n->name, eq, nops);
        QF_TRY(es_parse_term(n, eq, &p, terms[t], &nterm[t]));
        t++;
        if (*p != ',') break;
        p++;
    }
    if (t != nops)
        return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s' has %d input terms, the node has %d inputs",
                        n->name, eq, t, nops);

    /* Ellipsis width per operand, and the broadcast width. */
    int ell_of[ES_MAX_OPS];
    for (int i = 0; i < nops; i++) {
        bool ell = false;
        nlet[i] = 0;
        for (int k = 0; k < nterm[i]; k++) {
            if (terms[i][k] == ES_ELLIPSIS) ell = true;
            else nlet[i]++;
        }
        int r = ts[i]->ndim;
        if (ell ? nlet[i] > r : nlet[i] != r)
            return qf_error(QF_ERR_SHAPE, "node '%s' (Einsum): equation '%s': term %d has %d labels%s, input %d has "
                            "rank %d", n->name, eq, i, nlet[i], ell ? " and '...'" : "", i, r);
        ell_of[i] = ell ? r - nlet[i] : 0;
        if (ell_of[i] > sp->nell) sp->nell = ell_of[i];
    }

    /* Labels per dim and label sizes: letters must agree exactly (unknown
     * dims aside), ellipsis dims broadcast. */
    char sa[128];
    for (int i = 0; i < nops; i++) {
        const qf_tensor *x = ts[i];
        int d = 0;
        sp->ndim[i] = x->ndim;
        for (int k = 0; k < nterm[i]; k++) {
            if (terms[i][k] != ES_ELLIPSIS) {
                sp->lab[i][d++] = terms[i][k];
                continue;
            }
            for (int j = 0; j < ell_of[i]; j++) sp->lab[i][d++] = ES_LETTERS + sp->nell - ell_of[i] + j;
        }
        for (d = 0; d < x->ndim; d++) {
            int l = sp->lab[i][d];
            int64_t have = sp->size[l], dim = x->dims[d];
            /* Unknown dims (-1, before shapes are bound) fit anything; a
             * known one replaces an unknown one, except a broadcast 1. */
            if (have == -2 || (have == -1 && !(l >= ES_LETTERS && dim == 1))) {
                if (have == -2 || dim != -1) sp->size[l] = dim;
                continue;
            }
            if (dim == -1 || dim == have || have == -1) continue;
            if (l >= ES_LETTERS && (dim == 1 || have == 1)) {
                if (have == 1) sp->size[l] = dim;
                continue;
            }
            char c = l < 26 ? (char)('a' + l) : (char)('A' + l - 26);
            if (l >= ES_LETTERS)
                return qf_error(QF_ERR_SHAPE, "node '%s' (Einsum): equation '%s': the '...' dims of input %d %s do "
                                "not broadcast with the other inputs", n->name, eq, i,
                                qf_shape_str(x->ndim, x->dims, sa, sizeof sa));
            return qf_error(QF_ERR_SHAPE, "node '%s' (Einsum): equation '%s': label '%c' has size %lld in input %d "
                            "%s but %lld elsewhere", n->name, eq, c, (long long)dim, i,
                            qf_shape_str(x->ndim, x->dims, sa, sizeof sa), (long long)have);
        }
    }

    /* Output labels. */
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '-') {
        if (p[1] != '>')
            return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s': '-' not followed by '>'", n->name,
                            eq);
        p += 2;
        int ids[QF_MAX_DIMS + 1], cnt;
        QF_TRY(es_parse_term(n, eq, &p, ids, &cnt));
        if (*p)
            return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s': unexpected '%c' in the output term",
                            n->name, eq, *p);
        bool seen[ES_LETTERS] = {false};
        for (int k = 0; k < cnt; k++) {
            if (ids[k] == ES_ELLIPSIS) {
                if (sp->nout + sp->nell > QF_MAX_DIMS) break;
                for (int j = 0; j < sp->nell; j++) sp->out[sp->nout++] = ES_LETTERS + j;
                continue;
            }
            char c = ids[k] < 26 ? (char)('a' + ids[k]) : (char)('A' + ids[k] - 26);
            if (seen[ids[k]])
                return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s': output label '%c' repeated",
                                n->name, eq, c);
            if (sp->size[ids[k]] == -2)
                return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s': output label '%c' is in no input",
                                n->name, eq, c);
            seen[ids[k]] = true;
            if (sp->nout >= QF_MAX_DIMS) break;
            sp->out[sp->nout++] = ids[k];
        }
        int want = 0;
        for (int k = 0; k < cnt; k++) want += ids[k] == ES_ELLIPSIS ? sp->nell : 1;
        if (want > QF_MAX_DIMS)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Einsum): equation '%s': output rank %d exceeds %d",
                            n->name, eq, want, QF_MAX_DIMS);
    } else {
        if (*p)
            return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): equation '%s': unexpected '%c'", n->name, eq, *p);
        /* Implicit output: ellipsis dims, then the letters used once, in
         * ASCII order (upper case first). */
        int uses[ES_LETTERS] = {0};
        for (int i = 0; i < nops; i++)
            for (int k = 0; k < nterm[i]; k++)
                if (terms[i][k] != ES_ELLIPSIS) uses[terms[i][k]]++;
        for (int j = 0; j < sp->nell; j++) sp->out[sp->nout++] = ES_LETTERS + j;
        for (int pass = 0; pass < 2; pass++)
            for (int l = pass ? 0 : 26; l < (pass ? 26 : ES_LETTERS); l++) {
                if (uses[l] != 1) continue;
                if (sp->nout >= QF_MAX_DIMS)
                    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Einsum): equation '%s': output rank exceeds %d",
                                    n->name, eq, QF_MAX_DIMS);
                sp->out[sp->nout++] = l;
            }
    }
    return QF_OK;
}

static qf_status es_spec_of(const qf_node *n, int nops, const qf_tensor *const *ts, es_spec *sp)
{
    const char *eq = qf_node_attr_string(n, "equation", NULL);
    if (!eq) return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): attribute 'equation' is missing", n->name);
    return es_parse(n, eq, nops, ts, sp);
}

/* --- the batched-GEMM plan --------------------------------------------------- */

typedef struct es_gemm {
    bool ok;                       /* the GEMM path applies */
    int nb, nm, nn, nk;
    int b[QF_MAX_DIMS], m[QF_MAX_DIMS], n[QF_MAX_DIMS], k[QF_MAX_DIMS];
    int64_t B, M, N, K;
    bool pack_a, pack_b, tmp_out; /* copies through scratch */
    bool ta, tb;
} es_gemm;

static bool es_has_label(const int *labs, int cnt, int l)
{
    for (int i = 0; i < cnt; i++)
        if (labs[i] == l) return true;
    return false;
}

/* Whether labs[0..cnt) is exactly the concatenation x ++ y ++ z. */
static bool es_is_concat(const int *labs, int cnt, const int *x, int nx, const int *y, int ny, const int *z, int nz)
{
    if (cnt != nx + ny + nz) return false;
    for (int i = 0; i < nx; i++)
        if (labs[i] != x[i]) return false;
    for (int i = 0; i < ny; i++)
        if (labs[nx + i] != y[i]) return false;
    for (int i = 0; i < nz; i++)
        if (labs[nx + ny + i] != z[i]) return false;
    return true;
}

static int64_t es_prod_sizes(const es_spec *sp, const int *labs, int cnt)
{
    int64_t p = 1;
    for (int i = 0; i < cnt; i++) p *= sp->size[labs[i]];
    return p;
}

static void es_gemm_plan(const es_spec *sp, const qf_tensor *const *ts, es_gemm *g)
{
    memset(g, 0, sizeof *g);
    if (sp->nops != 2) return;
    const int *la = sp->lab[0], *lb = sp->lab[1];
    int na = sp->ndim[0], nb = sp->ndim[1];
    /* No diagonals, no broadcast dims, all sizes known. */
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < sp->ndim[i]; d++) {
            int l = sp->lab[i][d];
            if (ts[i]->dims[d] != sp->size[l] || sp->size[l] < 0) return;
            for (int e = d + 1; e < sp->ndim[i]; e++)
                if (sp->lab[i][e] == l) return;
        }
    for (int i = 0; i < sp->nout; i++) {
        int l = sp->out[i];
        bool ia = es_has_label(la, na, l), ib = es_has_label(lb, nb, l);
        if (ia && ib) g->b[g->nb++] = l;
        else if (ia) g->m[g->nm++] = l;
        else if (ib) g->n[g->nn++] = l;
        else return; /* an ellipsis label of size 1 in no operand's dims */
    }
    for (int d = 0; d < na; d++) {
        int l = la[d];
        if (es_has_label(sp->out, sp->nout, l)) continue;
        if (!es_has_label(lb, nb, l)) return; /* summed within A alone */
        g->k[g->nk++] = l;
    }
    for (int d = 0; d < nb; d++)
        if (!es_has_label(sp->out, sp->nout, lb[d]) && !es_has_label(la, na, lb[d])) return;
    g->B = es_prod_sizes(sp, g->b, g->nb);
    g->M = es_prod_sizes(sp, g->m, g->nm);
    g->N = es_prod_sizes(sp, g->n, g->nn);
    g->K = es_prod_sizes(sp, g->k, g->nk);
    if (g->M > INT_MAX || g->N > INT_MAX || g->K > INT_MAX) return;
    if (es_is_concat(la, na, g->b, g->nb, g->m, g->nm, g->k, g->nk)) g->ta = false;
    else if (es_is_concat(la, na, g->b, g->nb, g->k, g->nk, g->m, g->nm)) g->ta = true;
    else g->pack_a = true;
    if (es_is_concat(lb, nb, g->b, g->nb, g->k, g->nk, g->n, g->nn)) g->tb = false;
    else if (es_is_concat(lb, nb, g->b, g->nb, g->n, g->nn, g->k, g->nk)) g->tb = true;
    else g->pack_b = true;
    g->tmp_out = !es_is_concat(sp->out, sp->nout, g->b, g->nb, g->m, g->nm, g->n, g->nn);
    g->ok = true;
}

static size_t es_gemm_scratch_elems(const es_gemm *g)
{
    size_t e = 0;
    if (g->pack_a) e += (size_t)(g->B * g->M * g->K);
    if (g->pack_b) e += (size_t)(g->B * g->K * g->N);
    if (g->tmp_out) e += (size_t)(g->B * g->M * g->N);
    return e;
}

/* dst (contiguous, labels dl[0..nd) in that order) = src read through the
 * per-label strides sst (elements). */
static void es_gather(void *dst, const void *src, size_t es, const es_spec *sp, const int *dl, int nd,
                   const int64_t *sst)
{
    int64_t total = es_prod_sizes(sp, dl, nd);
    if (total == 0) return;
    int64_t idx[QF_MAX_DIMS] = {0}, off = 0;
    int64_t inner = nd ? sp->size[dl[nd - 1]] : 1, istr = nd ? sst[dl[nd - 1]] : 0;
    for (int64_t o = 0; o < total; o += inner) {
        if (es == 4) {
            float *d = (float *)dst + o;
            const float *s = (const float *)src + off;
            for (int64_t i = 0; i < inner; i++) d[i] = s[i * istr];
        } else {
            double *d = (double *)dst + o;
            const double *s = (const double *)src + off;
            for (int64_t i = 0; i < inner; i++) d[i] = s[i * istr];
        }
        for (int k = nd - 2; k >= 0; k--) {
            int l = dl[k];
            off += sst[l];
            if (++idx[k] < sp->size[l]) break;
            off -= sst[l] * sp->size[l];
            idx[k] = 0;
        }
    }
}

/* Per-label strides (elements) of a contiguous layout with labels l[0..n). */
static void es_layout_strides(const es_spec *sp, const int *l, int n, int64_t *st)
{
    int64_t s = 1;
    for (int i = n - 1; i >= 0; i--) {
        st[l[i]] = s;
        s *= sp->size[l[i]];
    }
}

/* Per-label strides of operand i: repeated labels add up (the diagonal), a
 * broadcast dim (size 1 against a larger label) contributes nothing. */
static void es_operand_strides(const es_spec *sp, int i, const qf_tensor *x, int64_t *st)
{
    for (int l = 0; l < ES_MAX_LABELS; l++) st[l] = 0;
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        int l = sp->lab[i][d];
        if (x->dims[d] == sp->size[l]) st[l] += s;
        s *= x->dims[d];
    }
}

static void es_concat3(int *dst, const int *x, int nx, const int *y, int ny, const int *z, int nz)
{
    memcpy(dst, x, sizeof(int) * (size_t)nx);
    memcpy(dst + nx, y, sizeof(int) * (size_t)ny);
    memcpy(dst + nx + ny, z, sizeof(int) * (size_t)nz);
}

static qf_status es_gemm_run(const qf_kernel_io *io, const es_spec *sp, const es_gemm *g)
{
    const qf_tensor *a = io->in[0], *b = io->in[1];
    qf_tensor *y = io->out[0];
    size_t es = qf_dtype_size(y->dtype);
    if (io->scratch_size < es_gemm_scratch_elems(g) * es)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (Einsum): scratch of %zu bytes, the kernel needs %zu",
                        io->node->name, io->scratch_size, es_gemm_scratch_elems(g) * es);
    char *scr = io->scratch;
    int64_t st[ES_MAX_LABELS];
    int lay[QF_MAX_DIMS];
    const void *pa = a->data, *pb = b->data;
    if (g->pack_a) {
        es_operand_strides(sp, 0, a, st);
        es_concat3(lay, g->b, g->nb, g->m, g->nm, g->k, g->nk);
        es_gather(scr, a->data, es, sp, lay, g->nb + g->nm + g->nk, st);
        pa = scr;
        scr += (size_t)(g->B * g->M * g->K) * es;
    }
    if (g->pack_b) {
        es_operand_strides(sp, 1, b, st);
        es_concat3(lay, g->b, g->nb, g->k, g->nk, g->n, g->nn);
        es_gather(scr, b->data, es, sp, lay, g->nb + g->nk + g->nn, st);
        pb = scr;
        scr += (size_t)(g->B * g->K * g->N) * es;
    }
    void *pc = g->tmp_out ? (void *)scr : y->data;
    int64_t M = g->M, N = g->N, K = g->K;
    if (K == 0) {
        memset(pc, 0, (size_t)(g->B * M * N) * es);
    } else if (M > 0 && N > 0) {
        int64_t lda = g->ta ? M : K, ldb = g->tb ? K : N;
        for (int64_t i = 0; i < g->B; i++) {
            size_t oa = (size_t)(i * M * K) * es, ob = (size_t)(i * K * N) * es, oc = (size_t)(i * M * N) * es;
            if (es == 4)
                QF_TRY(qf_sgemm(io->node, &(qf_sgemm_args){.ta = g->ta, .tb = g->tb, .m = M, .n = N, .k = K,
                                                            .alpha = 1.0f, .a = (const float *)((const char *)pa + oa),
                                                            .lda = lda, .b = (const float *)((const char *)pb + ob),
                                                            .ldb = ldb, .c = (float *)((char *)pc + oc), .ldc = N}));
            else
                QF_TRY(qf_dgemm(io->node, &(qf_dgemm_args){.ta = g->ta, .tb = g->tb, .m = M, .n = N, .k = K,
                                                            .alpha = 1.0, .a = (const double *)((const char *)pa + oa),
                                                            .lda = lda, .b = (const double *)((const char *)pb + ob),
                                                            .ldb = ldb, .c = (double *)((char *)pc + oc), .ldc = N}));
        }
    }
    if (g->tmp_out) {
        es_concat3(lay, g->b, g->nb, g->m, g->nm, g->n, g->nn);
        es_layout_strides(sp, lay, g->nb + g->nm + g->nn, st);
        es_gather(y->data, pc, es, sp, sp->out, sp->nout, st);
    }
    return QF_OK;
}

/* --- the generic loop ---------------------------------------------------- */

static double es_load(const void *p, qf_dtype dt, int64_t i)
{
    return dt == QF_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void es_generic_run(const qf_kernel_io *io, const es_spec *sp)
{
    qf_tensor *y = io->out[0];
    qf_dtype dt = y->dtype;
    int nops = sp->nops;
    /* Loop labels: the output's, then the summed ones (used in some input). */
    int loop[ES_MAX_LABELS], nl = 0;
    for (int i = 0; i < sp->nout; i++) loop[nl++] = sp->out[i];
    int64_t S = 1;
    for (int l = 0; l < ES_MAX_LABELS; l++)
        if (sp->size[l] != -2 && !es_has_label(sp->out, sp->nout, l)) {
            loop[nl++] = l;
            S *= sp->size[l];
        }
    int64_t O = qf_tensor_numel(y);
    if (O == 0) return;
    if (S == 0) {
        memset(y->data, 0, (size_t)O * qf_dtype_size(dt));
        return;
    }
    int64_t st[ES_MAX_OPS][ES_MAX_LABELS];
    for (int i = 0; i < nops; i++) {
        int64_t full[ES_MAX_LABELS];
        es_operand_strides(sp, i, io->in[i], full);
        for (int k = 0; k < nl; k++) st[i][k] = full[loop[k]];
    }
    int64_t idx[ES_MAX_LABELS] = {0}, off[ES_MAX_OPS] = {0};
    for (int64_t o = 0; o < O; o++) {
        double acc = 0.0;
        for (int64_t s = 0; s < S; s++) {
            double prod = 1.0;
            for (int i = 0; i < nops; i++) prod *= es_load(io->in[i]->data, dt, off[i]);
            acc += prod;
            for (int k = nl - 1; k >= 0; k--) {
                for (int i = 0; i < nops; i++) off[i] += st[i][k];
                if (++idx[k] < sp->size[loop[k]]) break;
                for (int i = 0; i < nops; i++) off[i] -= st[i][k] * sp->size[loop[k]];
                idx[k] = 0;
            }
        }
        if (dt == QF_DTYPE_F32) ((float *)y->data)[o] = (float)acc;
        else ((double *)y->data)[o] = acc;
    }
}

/* --- op entry points ----------------------------------------------------------- */

static qf_status qf_einsum_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    if (n->ninputs < 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): expects at least 1 input", n->name);
    if (n->ninputs > ES_MAX_OPS)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Einsum): %d operands, at most %d are supported", n->name,
                        n->ninputs, ES_MAX_OPS);
    const qf_tensor *ts[ES_MAX_OPS];
    for (int i = 0; i < n->ninputs; i++) {
        if (!n->inputs[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): input %d is missing", n->name, i);
        ts[i] = &n->inputs[i]->type;
    }
    qf_dtype dt = ts[0]->dtype;
    if (dt != QF_DTYPE_F32 && dt != QF_DTYPE_F64)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Einsum): dtype %s is not supported (float32, float64)",
                        n->name, qf_dtype_name(dt));
    for (int i = 1; i < n->ninputs; i++)
        if (ts[i]->dtype != dt)
            return qf_error(QF_ERR_INVALID, "node '%s' (Einsum): input %d has dtype %s, input 0 has %s", n->name, i,
                            qf_dtype_name(ts[i]->dtype), qf_dtype_name(dt));
    es_spec sp;
    QF_TRY(es_spec_of(n, n->ninputs, ts, &sp));
    int64_t y[QF_MAX_DIMS];
    for (int i = 0; i < sp.nout; i++) y[i] = sp.size[sp.out[i]];
    qf_set_output(n, 0, dt, sp.nout, y);
    return QF_OK;
}

static size_t qf_einsum_scratch(const qf_node *n, const void *state)
{
    (void)state;
    if (n->ninputs < 1 || n->ninputs > ES_MAX_OPS) return 0;
    const qf_tensor *ts[ES_MAX_OPS];
    for (int i = 0; i < n->ninputs; i++) {
        if (!n->inputs[i]) return 0;
        ts[i] = &n->inputs[i]->type;
    }
    es_spec sp;
    es_gemm g;
    /* A bad equation was reported by inference already; this only sizes. */
    if (es_spec_of(n, n->ninputs, ts, &sp) != QF_OK) return 0;
    es_gemm_plan(&sp, ts, &g);
    if (!g.ok) return 0;
    return es_gemm_scratch_elems(&g) * qf_dtype_size(ts[0]->dtype);
}

static qf_status qf_einsum_forward_f32(const qf_kernel_io *io)
{
    es_spec sp;
    QF_TRY(es_spec_of(io->node, io->nin, (const qf_tensor *const *)io->in, &sp));
    es_gemm g;
    es_gemm_plan(&sp, (const qf_tensor *const *)io->in, &g);
    if (g.ok && qf_tensor_numel(io->out[0]) > 0) return es_gemm_run(io, &sp, &g);
    es_generic_run(io, &sp);
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_einsum_kernels = {
    .infer = qf_einsum_infer,
    .scratch = qf_einsum_scratch,
    .forward_f32 = qf_einsum_forward_f32,
};
