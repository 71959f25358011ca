/* The process-wide engine and thread choice of qfold/exec.h, over the
 * backend layer (backend/backend.h) and the thread pool of core/parallel.h. */
#include <stdio.h>
#include <string.h>

#include "../core/parallel.h"
#include "backend/backend.h"
#include "qfold/exec.h"

_Static_assert((int)QF_ENGINE_AUTO == QF_BACKEND_AUTO && (int)QF_ENGINE_REF == QF_BACKEND_REF &&
                   (int)QF_ENGINE_DNNL == QF_BACKEND_DNNL,
               "qf_engine mirrors the backend's values");

qf_status qf_set_engine(qf_engine e) { return qf_backend_set_engine((int)e); }

qf_engine qf_get_engine(void) { return (qf_engine)qf_backend_engine(); }

void qf_engine_prefer_training(void) { qf_backend_prefer_training(); }

int qf_engine_environment(qf_engine_env *env)
{
    const char *names[QF_ENGINE_ENV_MAX];
    char values[QF_ENGINE_ENV_MAX][24];
    int n = qf_backend_environment(names, values);
    for (int k = 0; k < n; k++) {
        env[k].name = names[k];
        memcpy(env[k].value, values[k], sizeof env[k].value);
    }
    return n;
}

const char *qf_engine_name(qf_engine e)
{
    switch (e) {
    case QF_ENGINE_AUTO: return "auto";
    case QF_ENGINE_REF: return "ref";
    case QF_ENGINE_DNNL: return "dnnl";
    }
    return "?";
}

const char *qf_engine_about(void)
{
    static char buf[320];
    if (qf_backend_engine() == QF_BACKEND_DNNL)
        snprintf(buf, sizeof buf, "%s", qf_backend_version());
    else
        snprintf(buf, sizeof buf, "oneDNN: %s", qf_backend_why_not());
    return buf;
}

qf_status qf_set_threads(int n)
{
    if (qf_parallel_set_threads(n) != 0)
        return qf_error(QF_ERR_INVALID, "threads: %d is out of range (0 = the cores, at most 16)", n);
    return QF_OK;
}

int qf_get_threads(void) { return qf_parallel_threads(); }
