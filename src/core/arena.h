/* A bump allocator in chunks (through the allocation hook), freed at once. */
#ifndef QF_ARENA_H
#define QF_ARENA_H

#include <stddef.h>

typedef struct qf_arena_chunk qf_arena_chunk;

typedef struct qf_arena {
    qf_arena_chunk *head;
    size_t used, cap; /* in the head chunk */
} qf_arena;

void qf_arena_init(qf_arena *a);
/* Zeroed, 16-byte aligned memory; NULL on out-of-memory. */
void *qf_arena_alloc(qf_arena *a, size_t size);
char *qf_arena_strdup(qf_arena *a, const char *s);
void qf_arena_free(qf_arena *a);

#endif
