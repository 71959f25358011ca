/* qf_optim_run: an optimizer run over gradients from files, for
 * optim_torch.py (the same run in torch.optim).
 *
 *   qf_optim_run DIR --nparams K --steps S [--optim sgd|adam|adamw] [--lr X]
 *       [--momentum X] [--dampening X] [--nesterov] [--wd X] [--beta1 X]
 *       [--beta2 X] [--eps X] [--clip MAXNORM] [--sched constant|step|cosine]
 *       [--warmup N] [--step-size N] [--gamma X] [--min-lr X] [--total N]
 *
 * Reads DIR/p_<i>.npy (the initial parameters) and DIR/g_<s>_<i>.npy (the
 * gradient of parameter i at step s; a missing file: frozen at that step).
 * Each step: clip (with --clip), then qf_optim_step at qf_schedule_lr(s).
 * Writes DIR/q_<s>_<i>.npy (parameter i after step s), DIR/lr.npy and
 * DIR/norm.npy (float64 [S]: the rate of each step, the norm before
 * clipping). Exit 0, or 1 with the library's message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qfold/io.h"
#include "qfold/train.h"

#define MAXP 16

static int fail(const char *what)
{
    fprintf(stderr, "qf_optim_run: %s: %s\n", what, qf_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: qf_optim_run DIR --nparams K --steps S [options]\n");
        return 2;
    }
    const char *dir = argv[1];
    int np = 0, steps = 0;
    double clip = 0.0;
    qf_optim_config c = {.kind = QF_OPTIM_SGD, .lr = 0.01};
    qf_schedule s = {.kind = QF_SCHED_CONSTANT};
    for (int a = 2; a < argc; a++) {
        const char *k = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(k, "--nesterov")) {
            c.nesterov = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "qf_optim_run: %s needs a value\n", k);
            return 2;
        }
        a++;
        if (!strcmp(k, "--nparams")) np = atoi(v);
        else if (!strcmp(k, "--steps")) steps = atoi(v);
        else if (!strcmp(k, "--optim")) {
            if (qf_optim_parse(v, &c.kind) != QF_OK) return fail(v);
        } else if (!strcmp(k, "--lr")) c.lr = atof(v);
        else if (!strcmp(k, "--momentum")) c.momentum = atof(v);
        else if (!strcmp(k, "--dampening")) c.dampening = atof(v);
        else if (!strcmp(k, "--wd")) c.weight_decay = atof(v);
        else if (!strcmp(k, "--beta1")) c.beta1 = atof(v);
        else if (!strcmp(k, "--beta2")) c.beta2 = atof(v);
        else if (!strcmp(k, "--eps")) c.eps = atof(v);
        else if (!strcmp(k, "--clip")) clip = atof(v);
        else if (!strcmp(k, "--sched")) {
            if (qf_sched_parse(v, &s.kind) != QF_OK) return fail(v);
        } else if (!strcmp(k, "--warmup")) s.warmup = atoll(v);
        else if (!strcmp(k, "--step-size")) s.step_size = atoll(v);
        else if (!strcmp(k, "--gamma")) s.gamma = atof(v);
        else if (!strcmp(k, "--min-lr")) s.min_lr = atof(v);
        else if (!strcmp(k, "--total")) s.total = atoll(v);
        else {
            fprintf(stderr, "qf_optim_run: bad argument '%s'\n", k);
            return 2;
        }
    }
    if (np < 1 || np > MAXP || steps < 1) {
        fprintf(stderr, "qf_optim_run: --nparams 1..%d and --steps >= 1 are required\n", MAXP);
        return 2;
    }
    char path[4096];
    qf_tensor params[MAXP] = {0}, grads[MAXP] = {0}, lrs = {0}, norms = {0};
    qf_tensor *pp[MAXP] = {0}, *gp[MAXP] = {0};
    for (int i = 0; i < np; i++) {
        snprintf(path, sizeof path, "%s/p_%d.npy", dir, i);
        if (qf_npy_load(path, &params[i]) != QF_OK) return fail(path);
        pp[i] = &params[i];
    }
    int64_t ns = steps;
    if (qf_tensor_init(&lrs, QF_DTYPE_F64, 1, &ns) != QF_OK || qf_tensor_init(&norms, QF_DTYPE_F64, 1, &ns) != QF_OK)
        return fail("alloc");
    qf_optimizer *o;
    if (qf_optim_init(&o, &c, np, pp) != QF_OK) return fail("init");
    for (int st = 0; st < steps; st++) {
        for (int i = 0; i < np; i++) {
            qf_tensor_free(&grads[i]);
            gp[i] = NULL;
            snprintf(path, sizeof path, "%s/g_%d_%d.npy", dir, st, i);
            if (access(path, F_OK) != 0) continue;
            if (qf_npy_load(path, &grads[i]) != QF_OK) return fail(path);
            gp[i] = &grads[i];
        }
        ((double *)norms.data)[st] = clip > 0 ? qf_clip_grad_norm(gp, np, clip) : 0.0;
        const double lr = qf_schedule_lr(&s, c.lr, st);
        ((double *)lrs.data)[st] = lr;
        if (qf_optim_step(o, (const qf_tensor *const *)gp, lr) != QF_OK) return fail("step");
        for (int i = 0; i < np; i++) {
            snprintf(path, sizeof path, "%s/q_%d_%d.npy", dir, st, i);
            if (qf_npy_save(path, &params[i]) != QF_OK) return fail(path);
        }
    }
    snprintf(path, sizeof path, "%s/lr.npy", dir);
    if (qf_npy_save(path, &lrs) != QF_OK) return fail(path);
    snprintf(path, sizeof path, "%s/norm.npy", dir);
    if (qf_npy_save(path, &norms) != QF_OK) return fail(path);
    qf_optim_free(o);
    for (int i = 0; i < np; i++) {
        qf_tensor_free(&params[i]);
        qf_tensor_free(&grads[i]);
    }
    qf_tensor_free(&lrs);
    qf_tensor_free(&norms);
    return 0;
}
