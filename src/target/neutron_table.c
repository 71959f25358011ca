/* The Neutron rule table: the rows of the five rule files looked up by op.
 * The helpers the rule files share are in neutron_rule_util.c (they call
 * them, this file calls their rows: no circle between the files). */
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
