/* Status codes and the thread-local error message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "qfold/status.h"

#define QF_MSG_MAX 1024

static _Thread_local char qf_msg[QF_MSG_MAX];

qf_status qf_error(qf_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qf_msg, sizeof qf_msg, fmt, ap);
    va_end(ap);
    return code;
}

qf_status qf_error_prefix(qf_status code, const char *fmt, ...)
{
    char head[QF_MSG_MAX], old[QF_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, qf_msg, sizeof old);
    size_t k = strlen(head);
    if (k >= sizeof qf_msg) k = sizeof qf_msg - 1;
    memcpy(qf_msg, head, k);
    size_t rest = strnlen(old, sizeof old - 1);
    if (rest > sizeof qf_msg - 1 - k) rest = sizeof qf_msg - 1 - k;
    memcpy(qf_msg + k, old, rest);
    qf_msg[k + rest] = '\0';
    return code;
}

const char *qf_error_message(void) { return qf_msg[0] ? qf_msg : "no error"; }

void qf_error_clear(void) { qf_msg[0] = '\0'; }

const char *qf_status_name(qf_status st)
{
    switch (st) {
    case QF_OK: return "ok";
    case QF_ERR_IO: return "i/o error";
    case QF_ERR_PARSE: return "parse error";
    case QF_ERR_UNSUPPORTED: return "unsupported";
    case QF_ERR_INVALID: return "invalid model";
    case QF_ERR_SHAPE: return "shape error";
    case QF_ERR_NUMERIC: return "numeric error";
    case QF_ERR_NOMEM: return "out of memory";
    case QF_ERR_MISMATCH: return "mismatch";
    case QF_ERR_INTERNAL: return "internal error";
    case QF_ERR_INTERRUPTED: return "interrupted";
    case QF_ERR_DIVERGED: return "training diverged";
    }
    return "unknown status";
}
