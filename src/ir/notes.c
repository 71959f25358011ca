/* Graph notes: bytes a file format keeps through qfold (graph_notes.h). */
#include <string.h>

#include "graph_impl.h"
#include "graph_notes.h"

qf_status qf_graph_note_add(qf_graph *g, int kind, const char *name, const void *data, size_t len)
{
    qf_graph_note *n = qf_graph_alloc(g, sizeof *n);
    uint8_t *copy = qf_graph_alloc(g, len ? len : 1);
    const char *nm = qf_graph_strdup(g, name ? name : "");
    if (!n || !copy || !nm) return qf_error(QF_ERR_NOMEM, "out of memory");
    if (len) memcpy(copy, data, len);
    n->kind = kind;
    n->name = nm;
    n->data = copy;
    n->len = len;
    qf_graph_note **tail = &g->impl->notes;
    while (*tail) tail = &(*tail)->next;
    *tail = n;
    return QF_OK;
}

const qf_graph_note *qf_graph_notes(const qf_graph *g) { return g->impl->notes; }

const qf_graph_note *qf_graph_note_find(const qf_graph *g, int kind, const char *name)
{
    for (const qf_graph_note *n = g->impl->notes; n; n = n->next)
        if (n->kind == kind && (!name || strcmp(n->name, name) == 0)) return n;
    return NULL;
}

void qf_graph_note_remove(qf_graph *g, int kind, const char *name)
{
    for (qf_graph_note **p = &g->impl->notes; *p;)
        if ((*p)->kind == kind && strcmp((*p)->name, name) == 0)
            *p = (*p)->next; /* the arena keeps its bytes until the graph goes */
        else
            p = &(*p)->next;
}

qf_status qf_graph_notes_copy(qf_graph *d, const qf_graph *s)
{
    for (const qf_graph_note *n = s->impl->notes; n; n = n->next)
        QF_TRY(qf_graph_note_add(d, n->kind, n->name, n->data, n->len));
    return QF_OK;
}
