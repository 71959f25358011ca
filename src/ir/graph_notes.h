/* Private: notes a graph carries for its file format, not interpreted by
 * qfold (src/ir/notes.c).
 *
 * A note is (kind, name, bytes): the ONNX importer keeps there what export
 * must write back although no pass looks at it (model and graph doc
 * strings, metadata_props, value_info, node doc strings, the symbolic dim
 * names of the graph inputs and outputs, problems found at import; see
 * src/io/onnx_keep.c). Notes live in the graph's arena, in the order they
 * were added, and are copied by qf_graph_clone. */
#ifndef QF_GRAPH_NOTES_H
#define QF_GRAPH_NOTES_H

#include <stddef.h>
#include <stdint.h>

#include "qfold/graph.h"

typedef struct qf_graph_note {
    int kind;         /* the writer's own numbering */
    const char *name; /* "" when the note names nothing */
    const uint8_t *data;
    size_t len;
    struct qf_graph_note *next;
} qf_graph_note;

/* Append a note (name and data copied into the graph's arena). */
qf_status qf_graph_note_add(qf_graph *g, int kind, const char *name, const void *data, size_t len);
/* The first note, in insertion order (NULL when there is none). */
const qf_graph_note *qf_graph_notes(const qf_graph *g);
/* The first note of `kind` named `name` (any name when name is NULL). */
const qf_graph_note *qf_graph_note_find(const qf_graph *g, int kind, const char *name);
/* Unlink every note of `kind` named `name`. */
void qf_graph_note_remove(qf_graph *g, int kind, const char *name);
/* Copy every note of s to d (qf_graph_clone). */
qf_status qf_graph_notes_copy(qf_graph *d, const qf_graph *s);

#endif
