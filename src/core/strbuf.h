/* A growable NUL-terminated string (through the allocation hook), for the
 * JSON texts qfold builds: the pass report, BatchNorm diagnostics, the CLI's
 * reports and --json outputs.
 *
 *   qf_strbuf b = {0};
 *   qf_strbuf_puts(&b, "{\"name\": ");
 *   qf_strbuf_json_string(&b, n->name);
 *   qf_strbuf_printf(&b, ", \"count\": %d}", k);
 *   size_t len;
 *   char *text = qf_strbuf_take(&b, &len);   // NULL: out of memory
 *   if (!text) return qf_error(QF_ERR_NOMEM, "out of memory writing ...");
 *
 * A failed append sets `oom` and every later append is a no-op, so a caller
 * checks once at the end (qf_strbuf_take returning NULL, or b.oom) and
 * reports QF_ERR_NOMEM itself. While `p` is not NULL it is NUL-terminated
 * and holds `len` bytes. */
#ifndef QF_STRBUF_H
#define QF_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct qf_strbuf {
    char *p;
    size_t len, cap;
    bool oom; /* sticky: an append failed, the text is incomplete */
} qf_strbuf;

void qf_strbuf_append(qf_strbuf *b, const char *s, size_t n);
void qf_strbuf_puts(qf_strbuf *b, const char *s);
void qf_strbuf_printf(qf_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* s (NULL as "") as a quoted JSON string, always valid UTF-8 JSON: '"' and
 * '\' escaped, newline, CR and tab as \n \r \t, other control characters
 * and DEL as \u00XX, valid UTF-8 as is, and each byte that starts no valid
 * UTF-8 sequence (an invalid lead byte, a continuation byte alone, a
 * sequence cut short, an overlong form, a surrogate, a code point past
 * U+10FFFF) as \ufffd, one per byte. The one JSON escaper of qfold: every
 * JSON text (pass, quantize, finalize and export reports, inspect --json,
 * eval --json) goes through it, since names in a model are bytes no one
 * checked. */
void qf_strbuf_json_string(qf_strbuf *b, const char *s);
/* The text (owned by the caller, qf_free it; "" when nothing was appended)
 * and its length; b is left empty. NULL when an append failed or the final
 * allocation fails (the partial text is freed). len may be NULL. */
char *qf_strbuf_take(qf_strbuf *b, size_t *len);
/* Frees the text; b is left empty and reusable. */
void qf_strbuf_free(qf_strbuf *b);

#endif
