/* The Neutron rule table: the rows of the five rule files looked up by op,
 * and the helpers the rule files share (neutron.h). */
#include <stdarg.h>
#include <stdio.h>

#include "neutron.h"

static const qf_neutron_row *const qf_neutron_tables[] = {
    qf_neutron_rows_conv, qf_neutron_rows_pool,  qf_neutron_rows_binary,
    qf_neutron_rows_act,  qf_neutron_rows_shape,
};

const qf_neutron_row *qf_neutron_row_find(qf_op op)
{
    /* A handful of rows per file: a linear scan is cheaper than keeping an
     * index in sync with them. */
    for (size_t t = 0; t < sizeof qf_neutron_tables / sizeof qf_neutron_tables[0]; t++)
        for (const qf_neutron_row *r = qf_neutron_tables[t]; r->op != QF_OP_COUNT; r++)
            if (r->op == op) return r;
    return NULL;
}

int64_t qf_neutron_round_up(int64_t a, int64_t m)
{
    if (m <= 1) return a;
    return (a + m - 1) / m * m;
}

bool qf_neutron_refuse(qf_nwhy *why, const char *fix, const char *fmt, ...)
{
    if (!why) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->rule, sizeof why->rule, fmt, ap);
    va_end(ap);
    snprintf(why->fix, sizeof why->fix, "%s", fix ? fix : "");
    return false;
}
