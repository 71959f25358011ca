/* Interruption: a process-wide request to stop the long work in progress
 * (qfold/status.h), set from any thread or a signal handler and checked by
 * the library's long loops. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "qfold/status.h"

/* A lock-free atomic: stores and loads are async-signal-safe. */
static atomic_int qf_interrupt_flag;

void qf_interrupt_request(void) { atomic_store(&qf_interrupt_flag, 1); }

bool qf_interrupt_pending(void) { return atomic_load(&qf_interrupt_flag) != 0; }

void qf_interrupt_clear(void) { atomic_store(&qf_interrupt_flag, 0); }

qf_status qf_interrupt_check(void)
{
    return atomic_load_explicit(&qf_interrupt_flag, memory_order_relaxed) ? qf_error(QF_ERR_INTERRUPTED, "interrupted")
                                                                          : QF_OK;
}

static void qf_interrupt_on_sigint(int sig)
{
    (void)sig;
    qf_interrupt_request();
}

static struct sigaction qf_interrupt_saved;
static int qf_interrupt_caught;

qf_status qf_interrupt_catch_sigint(void)
{
    if (qf_interrupt_caught) return QF_OK;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = qf_interrupt_on_sigint;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, &qf_interrupt_saved) != 0)
        return qf_error(QF_ERR_IO, "cannot catch SIGINT (sigaction failed)");
    qf_interrupt_caught = 1;
    return QF_OK;
}

void qf_interrupt_release_sigint(void)
{
    if (!qf_interrupt_caught) return;
    sigaction(SIGINT, &qf_interrupt_saved, NULL);
    qf_interrupt_caught = 0;
}
