/* The context a pass records its rewrites and skips in (qf_pass_ctx), and
 * the report the pass manager collects them into. Private to src/passes/:
 * the pass manager (pass_manager.c) fills a context per run of a pass and
 * moves its events into the report; the recording (pass_ctx.c) is what the
 * passes call. The recording is a file of its own so that the passes use it
 * without using the pass manager, which uses them (its registry): no
 * circle between the files. */
#ifndef QF_PASSES_PASS_CTX_H
#define QF_PASSES_PASS_CTX_H

#include <stdbool.h>

#include "core/arena.h"
#include "qfold/pass.h"

/* The public report is the first member, so a qf_pass_report* is the impl. */
typedef struct qf_report_impl {
    qf_pass_report pub;
    qf_arena arena;
    int cap_results;
} qf_report_impl;

typedef struct qf_event_list {
    qf_pass_event *ev;
    int n, cap;
} qf_event_list;

struct qf_pass_ctx {
    qf_report_impl *rep;
    void *user;         /* qf_pass_options.user */
    qf_event_list rewritten, skipped;
    bool oom; /* an event could not be recorded: the run fails with NOMEM */
};

#endif
