/* The engine choice of backend.h and the backend's tables. Compiled in every
 * build; the oneDNN parts only with QF_HAVE_DNNL (src/backend/dnnl/). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops/math/gemm.h"
#if QF_HAVE_DNNL
#include "backend/dnnl/dnnl_kernels.h"
#include "backend/dnnl/dnnl_lib.h"
#endif

static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
static int engine_wanted = -1; /* -1: not set: QFOLD_ENGINE, else AUTO */
#if !QF_HAVE_DNNL
static bool asked_dnnl; /* AUTO or DNNL was asked for: say why it is not there */
#endif

static int engine_default(void)
{
    const char *e = getenv("QFOLD_ENGINE");
    if (e && strcmp(e, "ref") == 0) return QF_BACKEND_REF;
    if (e && strcmp(e, "dnnl") == 0) return QF_BACKEND_DNNL;
    return QF_BACKEND_AUTO;
}

/* Called with backend_lock held: resolve AUTO / DNNL into what is active,
 * and tell the backend whether it is. */
static int engine_resolve(int want)
{
#if QF_HAVE_DNNL
    int e = want != QF_BACKEND_REF && qf_dnnl_load() ? QF_BACKEND_DNNL : QF_BACKEND_REF;
    qf_dnnl_activate(e == QF_BACKEND_DNNL);
    return e;
#else
    if (want != QF_BACKEND_REF) asked_dnnl = true;
    return QF_BACKEND_REF;
#endif
}

static const char *engine_why_not(void)
{
#if QF_HAVE_DNNL
    return qf_dnnl_why_not();
#else
    return asked_dnnl ? "qfold was built without oneDNN" : "";
#endif
}

/* The engine new plans use, resolved (AUTO / DNNL load oneDNN the first time). */
static int engine_current(void)
{
    pthread_mutex_lock(&backend_lock);
    if (engine_wanted < 0) engine_wanted = engine_default();
    int e = engine_resolve(engine_wanted);
    pthread_mutex_unlock(&backend_lock);
    return e;
}

/* The reference GEMM's hook (ops/math/gemm.h): oneDNN's sgemm while that
 * engine is active. It asks the engine at the call, as qf_sgemm did before
 * the backend was a layer: the first product may be what loads oneDNN (a
 * constant fold at import loads nothing until it multiplies). */
static bool backend_sgemm(const qf_node *n, const qf_sgemm_args *g, qf_status *st)
{
#if QF_HAVE_DNNL
    if (engine_current() == QF_BACKEND_DNNL) {
        *st = qf_dnnl_sgemm(n, g);
        return true;
    }
#else
    (void)n;
    (void)g;
    (void)st;
#endif
    return false;
}

void qf_backend_attach(void) { qf_sgemm_set_backend(backend_sgemm); }

int qf_backend_engine(void)
{
    qf_backend_attach();
    return engine_current();
}

qf_status qf_backend_set_engine(int engine)
{
    if (engine != QF_BACKEND_AUTO && engine != QF_BACKEND_REF && engine != QF_BACKEND_DNNL)
        return qf_error(QF_ERR_INVALID, "unknown engine %d", engine);
    qf_backend_attach();
    pthread_mutex_lock(&backend_lock);
    int active = engine_resolve(engine);
    qf_status st = QF_OK;
    if (engine == QF_BACKEND_DNNL && active != QF_BACKEND_DNNL) {
#if QF_HAVE_DNNL
        const bool nomem = qf_dnnl_out_of_memory();
#else
        const bool nomem = false;
#endif
        /* The engine stays what it was: the reference one, as oneDNN is not there. */
        st = qf_error(nomem ? QF_ERR_NOMEM : QF_ERR_UNSUPPORTED, "engine dnnl: %s",
                      engine_why_not());
    } else {
        engine_wanted = engine;
    }
    pthread_mutex_unlock(&backend_lock);
    return st;
}

const char *qf_backend_why_not(void)
{
    if (qf_backend_engine() == QF_BACKEND_DNNL) return "";
    const char *w = engine_why_not();
    return w[0] ? w : "engine ref chosen";
}

int qf_backend_environment(const char **names, char (*values)[24])
{
#if QF_HAVE_DNNL
    pthread_mutex_lock(&backend_lock);
    int k = qf_dnnl_environment(names, values); /* reads the training choice */
    pthread_mutex_unlock(&backend_lock);
    return k;
#else
    (void)names;
    (void)values;
    return 0;
#endif
}

void qf_backend_prefer_training(void)
{
#if QF_HAVE_DNNL
    pthread_mutex_lock(&backend_lock);
    qf_dnnl_prefer_training(); /* read by the load, under the lock too */
    pthread_mutex_unlock(&backend_lock);
#endif
}

const char *qf_backend_version(void)
{
#if QF_HAVE_DNNL
    if (qf_backend_engine() == QF_BACKEND_DNNL) return qf_dnnl_version();
#endif
    return "";
}

const qf_backend_kernels *qf_backend_kernels_get(qf_op op)
{
#if QF_HAVE_DNNL
    return (unsigned)op < QF_OP_COUNT ? qf_dnnl_table[op] : NULL;
#else
    (void)op;
    return NULL;
#endif
}

const qf_backend_kernels *qf_backend_train_kernels_get(qf_op op)
{
#if QF_HAVE_DNNL
    return (unsigned)op < QF_OP_COUNT ? qf_dnnl_train_table[op] : NULL;
#else
    (void)op;
    return NULL;
#endif
}

bool qf_backend_can_fuse(const qf_node *producer, const qf_node *follower)
{
#if QF_HAVE_DNNL
    return qf_dnnl_can_fuse(producer, follower);
#else
    (void)producer;
    (void)follower;
    return false;
#endif
}

bool qf_backend_conv_winograd(const qf_node *n)
{
#if QF_HAVE_DNNL
    return qf_dnnl_conv_winograd(n);
#else
    (void)n;
    return false;
#endif
}
