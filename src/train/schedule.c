/* Learning-rate schedules (qfold/train.h): constant, step (torch's StepLR),
 * cosine (torch's CosineAnnealingLR), each after an optional linear warm-up.
 *
 * For optimizer step s (0-based) and base rate lr:
 *   s <  warmup:  lr * (s + 1) / warmup     (torch's LinearLR with start_factor
 *                                            1 / warmup over warmup - 1 steps)
 *   then, with t = s - warmup:
 *   constant      lr
 *   step          lr * gamma ^ floor(t / step_size)
 *   cosine        min_lr + (lr - min_lr) * (1 + cos(pi * t / total)) / 2
 *
 * The closed forms of torch's schedulers (_get_closed_form_lr). torch's
 * step() applies them recursively (a product of per-step factors); the two
 * agree to ~1e-15 relative over hundreds of steps (tests/train/optim_torch.py
 * holds them to 1e-12 over 100). Past `total`, cosine continues periodically,
 * as torch's.
 */
#include <math.h>
#include <string.h>

#include "qfold/train.h"

static const char *const sched_names[] = {"constant", "step", "cosine"};

const char *qf_sched_name(qf_sched_kind k)
{
    return (unsigned)k < sizeof sched_names / sizeof *sched_names ? sched_names[k] : "?";
}

qf_status qf_sched_parse(const char *s, qf_sched_kind *out)
{
    for (int k = 0; k < (int)(sizeof sched_names / sizeof *sched_names); k++)
        if (s && !strcmp(s, sched_names[k])) {
            *out = (qf_sched_kind)k;
            return QF_OK;
        }
    return qf_error(QF_ERR_INVALID, "unknown schedule '%s' (expected cosine, step or constant)", s ? s : "");
}

double qf_schedule_lr(const qf_schedule *s, double lr, int64_t step)
{
    if (step < 0) step = 0;
    if (s->warmup > 0) {
        if (step < s->warmup) return lr * (double)(step + 1) / (double)s->warmup;
        step -= s->warmup;
    }
    if (s->kind == QF_SCHED_STEP && s->step_size > 0) {
        const double gamma = s->gamma != 0.0 ? s->gamma : 0.1;
        return lr * pow(gamma, (double)(step / s->step_size));
    }
    if (s->kind == QF_SCHED_COSINE && s->total > 0) {
        /* pi as Python's math.pi (the double nearest to it). */
        const double pi = 3.14159265358979323846;
        return s->min_lr + (lr - s->min_lr) * (1.0 + cos(pi * (double)step / (double)s->total)) / 2.0;
    }
    return lr; /* constant, or a step / cosine schedule without its length */
}
