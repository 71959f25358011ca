/* Deployment targets (qfold/target.h): their names, defaults and the
 * `--set KEY=VALUE` parameters. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/target.h"

static const char *const qf_target_list[] = {"neutron", NULL};

const char *const *qf_target_names(void) { return qf_target_list; }

qf_status qf_target_spec_init(qf_target_spec *t, const char *name)
{
    if (!name || strcmp(name, "neutron") != 0)
        return qf_error(QF_ERR_INVALID, "unknown target '%s' (known: neutron)", name ? name : "");
    /* ExecuTorch's i.MX RT700 test target (tests/neutron-imxrt700.ini):
     * Neutron-C, 8 MACs per pipe, 8 pipes; the current (SDK 3.x) rules. */
    *t = (qf_target_spec){
        .name = qf_target_list[0],
        .flow = QF_NEUTRON_SDK3,
        .num_macs = 8,
        .num_pipes = 8,
        .neutron_passes = true};
    return QF_OK;
}

/* A count in [1, 4096]: no Neutron has more MACs or pipes. */
static qf_status qf_target_count(const char *key, const char *v, int *out)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < 1 || n > 4096)
        return qf_error(QF_ERR_INVALID, "%s takes a whole number in [1, 4096], got '%s'", key, v);
    *out = (int)n;
    return QF_OK;
}

qf_status qf_target_spec_set(qf_target_spec *t, const char *rule)
{
    const char *eq = rule ? strchr(rule, '=') : NULL;
    if (!eq)
        return qf_error(QF_ERR_INVALID,
                        "'%s' is not KEY=VALUE (keys: neutron-flow, num-macs, num-pipes, "
                        "neutron-passes)",
                        rule ? rule : "");
    size_t klen = (size_t)(eq - rule);
    const char *v = eq + 1;
    if (klen == 12 && strncmp(rule, "neutron-flow", klen) == 0) {
        if (strcmp(v, "sdk3") == 0)
            t->flow = QF_NEUTRON_SDK3;
        else if (strcmp(v, "sdk2") == 0)
            t->flow = QF_NEUTRON_SDK2;
        else
            return qf_error(QF_ERR_INVALID,
                            "neutron-flow takes sdk3 (eIQ Neutron SDK 3.x, the default) or sdk2 "
                            "(Neutron SW 2.x), "
                            "got '%s'",
                            v);
        return QF_OK;
    }
    if (klen == 8 && strncmp(rule, "num-macs", klen) == 0)
        return qf_target_count("num-macs", v, &t->num_macs);
    if (klen == 9 && strncmp(rule, "num-pipes", klen) == 0)
        return qf_target_count("num-pipes", v, &t->num_pipes);
    if (klen == 14 && strncmp(rule, "neutron-passes", klen) == 0) {
        if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
            return qf_error(QF_ERR_INVALID, "neutron-passes takes on or off, got '%s'", v);
        t->neutron_passes = strcmp(v, "on") == 0;
        return QF_OK;
    }
    return qf_error(
        QF_ERR_INVALID,
        "unknown key '%.*s' in '%s' (keys: neutron-flow=sdk3|sdk2, num-macs=N, num-pipes=N, "
        "neutron-passes=on|off)",
        (int)klen, rule, rule);
}
