#include "strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qfold/status.h"

#define QF_STRBUF_MIN 256

/* Room for n more bytes plus the NUL; false (and oom set) when it cannot be
 * had. */
static bool qf_strbuf_reserve(qf_strbuf *b, size_t n)
{
    if (b->oom) return false;
    if (n > SIZE_MAX - 1 - b->len) {
        b->oom = true;
        return false;
    }
    size_t need = b->len + n + 1;
    if (need <= b->cap) return true;
    size_t ncap = b->cap ? b->cap : QF_STRBUF_MIN;
    while (ncap < need) ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    char *np = qf_realloc(b->p, ncap);
    if (!np) {
        b->oom = true;
        return false;
    }
    b->p = np;
    b->cap = ncap;
    return true;
}

void qf_strbuf_append(qf_strbuf *b, const char *s, size_t n)
{
    if (!qf_strbuf_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void qf_strbuf_puts(qf_strbuf *b, const char *s) { qf_strbuf_append(b, s, strlen(s)); }

void qf_strbuf_printf(qf_strbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    /* Format into the free space; when it does not fit, grow to the length
     * vsnprintf reported and format again. */
    size_t room = b->cap - b->len;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)k >= room) {
        if (!qf_strbuf_reserve(b, (size_t)k)) return;
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)k;
}

void qf_strbuf_json_string(qf_strbuf *b, const char *s)
{
    const char *run = s ? s : "";
    qf_strbuf_puts(b, "\"");
    /* Copy runs of bytes that need no escape in one append each. */
    for (const char *c = run;; c++) {
        unsigned char u = (unsigned char)*c;
        if (u && u != '"' && u != '\\' && u >= 0x20) continue;
        qf_strbuf_append(b, run, (size_t)(c - run));
        if (!u) break;
        if (u == '"' || u == '\\') qf_strbuf_append(b, (const char[]){'\\', (char)u}, 2);
        else qf_strbuf_printf(b, "\\u%04x", u);
        run = c + 1;
    }
    qf_strbuf_puts(b, "\"");
}

char *qf_strbuf_take(qf_strbuf *b, size_t *len)
{
    if (len) *len = 0;
    /* Nothing appended yet: reserve allocates the "" that is returned. */
    if (!qf_strbuf_reserve(b, 0)) {
        qf_strbuf_free(b);
        return NULL;
    }
    b->p[b->len] = '\0';
    char *p = b->p;
    if (len) *len = b->len;
    *b = (qf_strbuf){0};
    return p;
}

void qf_strbuf_free(qf_strbuf *b)
{
    qf_free(b->p);
    *b = (qf_strbuf){0};
}
