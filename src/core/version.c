/* The library's version (qfold/status.h, qf_version). */
#include "qfold/status.h"

#ifndef QF_VERSION
#define QF_VERSION "unknown"
#endif

const char *qf_version(void) { return QF_VERSION; }
