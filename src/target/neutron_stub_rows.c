/* TEMPORARY: empty rule tables so that the check engine links and runs
 * before the rule files exist. Every table holds only its terminator, so
 * every op is "no Neutron converter". The rule files neutron_conv.c and
 * neutron_pool.c define theirs; neutron_binary.c, neutron_act.c and
 * neutron_shape.c define the three below for real, and whoever adds the
 * last of them deletes this file. */
#include "neutron.h"

const qf_neutron_row qf_neutron_rows_binary[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_act[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
const qf_neutron_row qf_neutron_rows_shape[] = {{QF_OP_COUNT, NULL, NULL, NULL}};
