/* core/clock.h: the monotonic clock. */
#include "clock.h"

#include <time.h>

double qf_clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
