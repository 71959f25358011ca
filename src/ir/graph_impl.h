/* Private parts of qf_graph: the arena and the name tables. */
#ifndef QF_GRAPH_IMPL_H
#define QF_GRAPH_IMPL_H

#include "../core/arena.h"
#include "qfold/graph.h"

/* Open-addressing map from a name (owned by the arena) to a pointer. */
typedef struct qf_name_map {
    const char **keys;
    void **vals;
    size_t cap, count; /* cap is a power of two */
} qf_name_map;

/* A buffer constants borrow from (qf_graph_adopt_buffer). */
typedef struct qf_graph_buffer {
    void *data;
    size_t size;
    struct qf_graph_buffer *next;
} qf_graph_buffer;

struct qf_graph_impl {
    qf_arena arena;
    qf_graph_buffer *buffers; /* freed after the values */
    qf_name_map value_names;
    qf_name_map node_names;
    uint32_t name_counter; /* for generated names */
    struct qf_graph_note *notes; /* graph_notes.h: kept for the file format */
    /* The file deferred payloads are read from (qf_graph_set_source). */
    bool has_src;
    int src_fd;
    int64_t src_size, src_mtime_sec, src_mtime_nsec;
    const char *src_path;
};

void *qf_name_map_get(const qf_name_map *m, const char *key);
qf_status qf_name_map_put(qf_name_map *m, const char *key, void *val);
void qf_name_map_del(qf_name_map *m, const char *key);
void qf_name_map_free(qf_name_map *m);

#endif
