#include <stdint.h>
#include <string.h>

#include "arena.h"
#include "qfold/status.h"

#define QF_ARENA_CHUNK (64 * 1024)
#define QF_ARENA_ALIGN 16

struct qf_arena_chunk {
    qf_arena_chunk *next;
    size_t pad; /* keeps data 16-byte aligned */
    unsigned char data[];
};

void qf_arena_init(qf_arena *a)
{
    a->head = NULL;
    a->used = a->cap = 0;
}

void *qf_arena_alloc(qf_arena *a, size_t size)
{
    /* Rounding up and the chunk header must not wrap around. */
    if (size > SIZE_MAX / 2) {
        qf_error(QF_ERR_NOMEM, "out of memory (asked the arena for %zu bytes)", size);
        return NULL;
    }
    size = (size + QF_ARENA_ALIGN - 1) & ~(size_t)(QF_ARENA_ALIGN - 1);
    if (!a->head || a->used + size > a->cap) {
        size_t cap = size > QF_ARENA_CHUNK ? size : QF_ARENA_CHUNK;
        qf_arena_chunk *c = qf_malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        a->head = c;
        a->used = 0;
        a->cap = cap;
    }
    void *p = a->head->data + a->used;
    a->used += size;
    memset(p, 0, size);
    return p;
}

char *qf_arena_strdup(qf_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *r = qf_arena_alloc(a, n);
    if (r) memcpy(r, s, n);
    return r;
}

void qf_arena_free(qf_arena *a)
{
    qf_arena_chunk *c = a->head;
    while (c) {
        qf_arena_chunk *next = c->next;
        qf_free(c);
        c = next;
    }
    qf_arena_init(a);
}
