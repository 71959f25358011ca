/* TEMPORARY: empty rule tables so that the check engine links and runs
 * before the rule files exist. Every table holds only its terminator, so
 * every op is "no Neutron converter". The rule files neutron_conv.c,
 * neutron_pool.c, neutron_binary.c, neutron_act.c and neutron_shape.c
 * define these arrays for real; whoever adds the first of them deletes this
 * file (and moves the other empty tables into their own files). */
#include "neutron.h"

const qf_neutron_row qf_neutron_rows_conv[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_pool[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_binary[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_act[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_shape[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
