/* The one clock qfold times its work with (pass times, calibration, training
 * steps, the CLI's summaries): CLOCK_MONOTONIC, so a change of the wall clock
 * never gives a negative or inflated duration.
 *
 *   double t0 = qf_clock_seconds();
 *   ... the work ...
 *   double ms = (qf_clock_seconds() - t0) * 1e3; */
#ifndef QF_CLOCK_H
#define QF_CLOCK_H

/* Seconds since an arbitrary fixed point (only differences mean anything). */
double qf_clock_seconds(void);

#endif
