/* Problems found while importing a model (onnx_problems.h). */
#include <string.h>

#include "onnx_problems.h"

static char *qf_problem_strdup(const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    char *r = qf_malloc(n);
    if (r) memcpy(r, s ? s : "", n);
    return r;
}

qf_status qf_problems_add(qf_problems *p, qf_problem_kind kind, const char *key, const char *where,
                          qf_status err)
{
    /* The message of err, before anything here can overwrite it. */
    const char *msg = err != QF_OK ? qf_error_message() : "";
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 8;
        qf_problem *items = qf_realloc(p->items, sizeof *items * (size_t)cap);
        if (!items) return QF_ERR_NOMEM;
        p->items = items;
        p->cap = cap;
    }
    qf_problem *it = &p->items[p->n];
    it->kind = kind;
    it->key = qf_problem_strdup(key);
    it->where = qf_problem_strdup(where);
    it->message = qf_problem_strdup(msg);
    if (!it->key || !it->where || !it->message) {
        qf_free(it->key);
        qf_free(it->where);
        qf_free(it->message);
        return QF_ERR_NOMEM;
    }
    p->n++;
    if (err == QF_OK || p->collect) return QF_OK;
    /* The message again: the allocations above may not touch it, but the
     * caller's error is the one to see. */
    return qf_error(err, "%s", it->message);
}

void qf_problems_free(qf_problems *p)
{
    for (int i = 0; i < p->n; i++) {
        qf_free(p->items[i].key);
        qf_free(p->items[i].where);
        qf_free(p->items[i].message);
    }
    qf_free(p->items);
    p->items = NULL;
    p->n = p->cap = 0;
}

static const char *const qf_problem_titles[QF_PROBLEM_KINDS] = {
    [QF_PROBLEM_OP] = "unsupported ops",
    [QF_PROBLEM_DTYPE] = "unsupported dtypes",
    [QF_PROBLEM_OPSET] = "unsupported opsets",
    [QF_PROBLEM_OTHER] = "other problems",
};

/* Whether items[j] is in the same group as items[i]. */
static bool qf_problem_same(const qf_problem *a, const qf_problem *b)
{
    return a->kind == b->kind && strcmp(a->key, b->key) == 0;
}

void qf_problems_print(const qf_problems *p, FILE *f, const char *indent)
{
    enum { QF_PROBLEM_NAMES_SHOWN = 8 };
    for (int kind = 0; kind < QF_PROBLEM_KINDS; kind++) {
        bool any = false;
        for (int i = 0; i < p->n; i++) {
            const qf_problem *it = &p->items[i];
            if ((int)it->kind != kind) continue;
            bool seen = false;
            for (int j = 0; j < i && !seen; j++) seen = qf_problem_same(&p->items[j], it);
            if (seen) continue;
            int count = 0, named = 0;
            for (int j = i; j < p->n; j++)
                if (qf_problem_same(&p->items[j], it)) {
                    count++;
                    named += p->items[j].where[0] != '\0';
                }
            if (!any) fprintf(f, "%s%s: ", indent ? indent : "", qf_problem_titles[kind]);
            fprintf(f, "%s%d x %s", any ? ", " : "", count, it->key);
            any = true;
            if (!named) continue;
            /* Ops are found at nodes; other problems say where themselves. */
            fputs(kind == QF_PROBLEM_OP ? (named == 1 ? " (node " : " (nodes ") : " (", f);
            int shown = 0;
            for (int j = i; j < p->n; j++) {
                if (!qf_problem_same(&p->items[j], it) || !p->items[j].where[0]) continue;
                if (shown == QF_PROBLEM_NAMES_SHOWN) {
                    fprintf(f, ", ... %d more", named - shown);
                    break;
                }
                fprintf(f, "%s%s", shown ? ", " : "", p->items[j].where);
                shown++;
            }
            fputc(')', f);
        }
        if (any) fputc('\n', f);
    }
}
