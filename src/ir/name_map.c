/* A small string -> pointer hash map (open addressing, tombstone-free
 * deletion by backward shift). Keys are borrowed (the graph arena owns them). */
#include <string.h>

#include "graph_impl.h"

static uint64_t qf_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void *qf_name_map_get(const qf_name_map *m, const char *key)
{
    if (!m->cap) return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = qf_hash_str(key) & mask;; i = (i + 1) & mask) {
        if (!m->keys[i]) return NULL;
        if (strcmp(m->keys[i], key) == 0) return m->vals[i];
    }
}

static qf_status qf_name_map_grow(qf_name_map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    const char **keys = qf_calloc(ncap, sizeof *keys);
    void **vals = qf_calloc(ncap, sizeof *vals);
    if (!keys || !vals) {
        qf_free(keys);
        qf_free(vals);
        return QF_ERR_NOMEM;
    }
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->keys[j]) continue;
        size_t i = qf_hash_str(m->keys[j]) & (ncap - 1);
        while (keys[i]) i = (i + 1) & (ncap - 1);
        keys[i] = m->keys[j];
        vals[i] = m->vals[j];
    }
    qf_free(m->keys);
    qf_free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    return QF_OK;
}

qf_status qf_name_map_put(qf_name_map *m, const char *key, void *val)
{
    if ((m->count + 1) * 2 > m->cap) QF_TRY(qf_name_map_grow(m));
    size_t mask = m->cap - 1;
    size_t i = qf_hash_str(key) & mask;
    for (; m->keys[i]; i = (i + 1) & mask) {
        if (strcmp(m->keys[i], key) == 0) {
            m->vals[i] = val;
            return QF_OK;
        }
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
    return QF_OK;
}

void qf_name_map_del(qf_name_map *m, const char *key)
{
    if (!m->cap) return;
    size_t mask = m->cap - 1;
    size_t i = qf_hash_str(key) & mask;
    for (; m->keys[i]; i = (i + 1) & mask)
        if (strcmp(m->keys[i], key) == 0) break;
    if (!m->keys[i]) return;
    m->keys[i] = NULL;
    m->count--;
    /* Backward-shift the cluster that follows so lookups stay correct. */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = qf_hash_str(m->keys[j]) & mask;
        /* Move j into the hole i unless home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        m->keys[j] = NULL;
        i = j;
    }
}

void qf_name_map_free(qf_name_map *m)
{
    qf_free(m->keys);
    qf_free(m->vals);
    memset(m, 0, sizeof *m);
}
