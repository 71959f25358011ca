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

/* Length of the valid UTF-8 sequence at s (1 to 4 bytes), or 0 when the
 * byte at s starts none: a continuation byte, a lead byte 0xF8-0xFF, a
 * sequence cut short (by any byte that is not a continuation, the NUL
 * included, so nothing past the string is read), an overlong form, a
 * surrogate (U+D800-U+DFFF) or a code point past U+10FFFF. */
static int qf_utf8_len(const unsigned char *s)
{
    unsigned c = s[0], cp, min;
    int n;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) {
        n = 2;
        cp = c & 0x1F;
        min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        cp = c & 0x0F;
        min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    for (int k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

void qf_strbuf_json_string(qf_strbuf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : ""), *run = p;
    qf_strbuf_puts(b, "\"");
    /* Copy runs of bytes that need no escape (printable ASCII and valid
     * UTF-8 sequences) in one append each. */
    for (;;) {
        unsigned c = *p;
        int n = c >= 0x20 && c != '"' && c != '\\' && c != 0x7F ? qf_utf8_len(p) : 0;
        if (n) {
            p += n;
            continue;
        }
        qf_strbuf_append(b, (const char *)run, (size_t)(p - run));
        if (!c) break;
        switch (c) {
        case '"': qf_strbuf_puts(b, "\\\""); break;
        case '\\': qf_strbuf_puts(b, "\\\\"); break;
        case '\n': qf_strbuf_puts(b, "\\n"); break;
        case '\r': qf_strbuf_puts(b, "\\r"); break;
        case '\t': qf_strbuf_puts(b, "\\t"); break;
        default:
            /* A control character (or DEL) by its code; a byte that starts
             * no valid UTF-8 sequence as U+FFFD, one per byte: JSON text
             * must be UTF-8 (RFC 8259), and a name is only ever shown. */
            if (c < 0x20 || c == 0x7F)
                qf_strbuf_printf(b, "\\u%04x", c);
            else
                qf_strbuf_puts(b, "\\ufffd");
        }
        run = ++p;
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
