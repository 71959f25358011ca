/* Recording what a pass did (qf_pass_rewrite, qf_pass_rewrite_as,
 * qf_pass_skip) into its context: every string copied into the report's
 * arena, so the report outlives the graph. Out of memory marks the context
 * (ctx->oom) and the pass manager fails the run with QF_ERR_NOMEM. */
#include <stdarg.h>
#include <stdio.h>

#include "pass_ctx.h"

static void qf_ctx_record(qf_pass_ctx *ctx, qf_event_list *l, const qf_node *n, qf_pass_action action,
                          const char *detail, const char *fmt, va_list ap)
{
    if (ctx->oom) return;
    if (l->n == l->cap) {
        int ncap = l->cap ? l->cap * 2 : 16;
        qf_pass_event *p = qf_realloc(l->ev, sizeof *p * (size_t)ncap);
        if (!p) {
            ctx->oom = true;
            return;
        }
        l->ev = p;
        l->cap = ncap;
    }
    char reason[1024];
    vsnprintf(reason, sizeof reason, fmt, ap);
    qf_arena *a = &ctx->rep->arena;
    qf_pass_event e = {
        .node = qf_arena_strdup(a, n ? n->name : ""),
        .op = qf_arena_strdup(a, n ? qf_op_name(n->op) : ""),
        .reason = qf_arena_strdup(a, reason),
        .detail = detail ? qf_arena_strdup(a, detail) : NULL,
        .node_op = n ? n->op : QF_OP_COUNT,
        .action = action,
    };
    if (!e.node || !e.op || !e.reason || (detail && !e.detail)) {
        ctx->oom = true;
        return;
    }
    l->ev[l->n++] = e;
}

void qf_pass_rewrite(qf_pass_ctx *ctx, const qf_node *n, const char *detail_json, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    qf_ctx_record(ctx, &ctx->rewritten, n, QF_PASS_REWROTE, detail_json, fmt, ap);
    va_end(ap);
}

void qf_pass_rewrite_as(qf_pass_ctx *ctx, const qf_node *n, qf_pass_action action, const char *detail_json,
                        const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    qf_ctx_record(ctx, &ctx->rewritten, n, action, detail_json, fmt, ap);
    va_end(ap);
}

void qf_pass_skip(qf_pass_ctx *ctx, const qf_node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    qf_ctx_record(ctx, &ctx->skipped, n, QF_PASS_REWROTE, NULL, fmt, ap);
    va_end(ap);
}

void *qf_pass_user(const qf_pass_ctx *ctx) { return ctx->user; }
