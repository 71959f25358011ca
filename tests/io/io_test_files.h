/* Whole-file helpers of the io tests (header-only: each test is one
 * translation unit, and FAIL counts in qf_check.h's statics). */
#ifndef QF_IO_TEST_FILES_H
#define QF_IO_TEST_FILES_H

#include <stdbool.h>
#include <string.h>

#include "qfold/io.h"
#include "tools/qf_check.h"

/* The whole file into *data (qf_free it); a failure is a test failure. */
static inline bool read_bytes(const char *path, void **data, size_t *size)
{
    qf_status st = qf_file_read(path, data, size);
    if (st != QF_OK) FAIL("cannot read %s: %s", path, qf_error_message());
    return st == QF_OK;
}

/* Whether files a and b hold the same bytes (an unreadable one fails). */
static inline bool same_file(const char *a, const char *b)
{
    void *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    bool same =
        read_bytes(a, &da, &na) && read_bytes(b, &db, &nb) && na == nb && memcmp(da, db, na) == 0;
    qf_free(da);
    qf_free(db);
    return same;
}

#endif
