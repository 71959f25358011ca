/* What activation.c offers other kernels: a SiLU in place, the reference
 * Sigmoid then Mul bit for bit (a backend runs it after a primitive whose
 * fused SiLU it does not compute itself). */
#ifndef QF_OPS_REF_ACTIVATION_H
#define QF_OPS_REF_ACTIVATION_H

#include <stdint.h>

/* y[a, b) = SiLU(y[a, b)) in place, as act_sigmoid_f32_slice then Mul; ctx is
 * the float array. A qf_parallel_fn. */
void qf_silu_f32_inplace_slice(void *ctx, int64_t a, int64_t b);

#endif
