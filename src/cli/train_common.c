/* What `qfold train` and `qfold qat` share (train_common.h): the training
 * options and their checks, the data and labels, the progress bar, the
 * per-epoch lines, the CSV log and SVG plot, Ctrl-C. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/strbuf.h"
#include "train_common.h"

#define QF_TR_PLOT_POINTS 1500 /* step curves are averaged down to this many points */

/* --- Ctrl-C ---------------------------------------------------------------------- */

static volatile sig_atomic_t qf_tr_stop;
static struct sigaction qf_tr_old_sigint;
static bool qf_tr_sigint_set;

/* The first SIGINT asks for a stop after the current step and puts the
 * previous handler back (main.c's: remove temporary files, die), so that a
 * second one ends qfold at once. sigaction is async-signal-safe. */
static void qf_tr_on_sigint(int sig)
{
    (void)sig;
    qf_tr_stop = 1;
    sigaction(SIGINT, &qf_tr_old_sigint, NULL);
}

static void qf_tr_catch_sigint(void)
{
    struct sigaction sa;
    if (sigaction(SIGINT, NULL, &qf_tr_old_sigint) != 0 || qf_tr_old_sigint.sa_handler == SIG_IGN) return;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = qf_tr_on_sigint;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) == 0) qf_tr_sigint_set = true;
}

static void qf_tr_release_sigint(void)
{
    if (qf_tr_sigint_set) sigaction(SIGINT, &qf_tr_old_sigint, NULL);
    qf_tr_sigint_set = false;
}


/* --- options ------------------------------------------------------------------------ */

bool qf_tr_int(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return false;
    *out = x;
    return true;
}

bool qf_tr_real(const char *v, double *out)
{
    char *end = NULL;
    double x = strtod(v, &end);
    if (!*v || *end || !isfinite(x)) return false;
    *out = x;
    return true;
}


/* The comma-separated --freeze list, split into a.freeze (NULL-terminated). */
static int qf_tr_split_freeze(const qf_cli_command *cmd, qf_tr_args *a)
{
    if (!a->freeze_arg) return QF_EXIT_OK;
    a->freeze_buf = qf_strdup(a->freeze_arg);
    if (!a->freeze_buf) return qf_cli_fail(QF_ERR_NOMEM);
    int n = 0;
    for (char *p = a->freeze_buf, *save = NULL, *tok; (tok = strtok_r(p, ",", &save)); p = NULL) {
        if (n == QF_TR_MAX_FREEZE)
            return qf_cli_usage_error(cmd, "--freeze names more than %d tensors", QF_TR_MAX_FREEZE);
        a->freeze[n++] = tok;
    }
    if (!n) return qf_cli_usage_error(cmd, "--freeze needs at least one name");
    a->freeze[n] = NULL;
    a->c.freeze = a->freeze;
    return QF_EXIT_OK;
}


bool qf_tr_option(qf_cli_args *a, qf_tr_args *ta, int *rc)
{
    const char *v;
    int64_t k;
    double x;
    qf_train_config *c = &ta->c;
    const qf_cli_command *cmd = a->cmd;
    *rc = QF_EXIT_OK;
#define QF_TR_NEEDS(cond, ...)                         \
    if (!(cond)) {                                     \
        *rc = qf_cli_value_error(cmd, __VA_ARGS__);    \
        return true;                                   \
    }
    if (qf_cli_args_value(a, "-o", "--output", &v)) {
        ta->out = v;
    } else if (qf_cli_args_value(a, "--data", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(ta->ndata < QF_TR_MAX_DATA, "more than %d --data", QF_TR_MAX_DATA);
        ta->data[ta->ndata++] = v;
    } else if (qf_cli_args_value(a, "--val-data", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(ta->nval < QF_TR_MAX_DATA, "more than %d --val-data", QF_TR_MAX_DATA);
        ta->val_data[ta->nval++] = v;
    } else if (qf_cli_args_value(a, "--labels", NULL, &v)) {
        ta->labels = v;
    } else if (qf_cli_args_value(a, "--val-labels", NULL, &v)) {
        ta->val_labels = v;
    } else if (qf_cli_args_value(a, "--epochs", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_int(v, 1, 1000000, &k), "--epochs takes a number from 1 to 1000000, got '%s'", v);
        c->epochs = (int)k;
    } else if (qf_cli_args_value(a, "--batch", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_int(v, 1, 1 << 20, &k), "--batch takes a number from 1 to %d, got '%s'", 1 << 20, v);
        c->batch = k;
    } else if (qf_cli_args_value(a, "--lr", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_real(v, &x) && x > 0, "--lr takes a learning rate > 0, got '%s'", v);
        c->optim.lr = x;
    } else if (qf_cli_args_value(a, "--optimizer", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_optim_parse(v, &c->optim.kind) == QF_OK, "--optimizer takes sgd, adam or adamw, got '%s'",
                    v);
    } else if (qf_cli_args_value(a, "--momentum", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_real(v, &x) && x >= 0 && x < 1, "--momentum takes a number in [0, 1), got '%s'", v);
        c->optim.momentum = x;
    } else if (qf_cli_args_flag(a, "--nesterov", NULL)) {
        c->optim.nesterov = true;
    } else if (qf_cli_args_value(a, "--weight-decay", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_real(v, &x) && x >= 0, "--weight-decay takes a number >= 0, got '%s'", v);
        c->optim.weight_decay = x;
    } else if (qf_cli_args_value(a, "--schedule", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_sched_parse(v, &c->sched.kind) == QF_OK, "--schedule takes constant, step or cosine, got '%s'",
                    v);
    } else if (qf_cli_args_value(a, "--step-size", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_int(v, 1, INT64_MAX, &k), "--step-size takes a number of steps >= 1, got '%s'", v);
        c->sched.step_size = k;
    } else if (qf_cli_args_value(a, "--gamma", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_real(v, &x) && x > 0, "--gamma takes a factor > 0, got '%s'", v);
        c->sched.gamma = x;
    } else if (qf_cli_args_value(a, "--warmup", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_int(v, 0, INT64_MAX, &k), "--warmup takes a number of steps >= 0, got '%s'", v);
        c->sched.warmup = k;
    } else if (qf_cli_args_value(a, "--clip-norm", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(qf_tr_real(v, &x) && x > 0, "--clip-norm takes a norm > 0, got '%s'", v);
        c->clip_norm = x;
    } else if (qf_cli_args_value(a, "--loss", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(!strcmp(v, "ce") || !strcmp(v, "mse"), "--loss takes ce or mse, got '%s'", v);
        c->loss = strcmp(v, "mse") == 0 ? QF_LOSS_MSE : QF_LOSS_CROSS_ENTROPY;
    } else if (qf_cli_args_value(a, "--freeze", NULL, &v)) {
        ta->freeze_arg = v;
    } else if (qf_cli_args_value(a, "--seed", NULL, &v)) {
        if (a->failed) return true;
        char *end = NULL;
        unsigned long long s = strtoull(v, &end, 10);
        QF_TR_NEEDS(*v && *v != '-' && !*end, "--seed takes a number >= 0, got '%s'", v);
        c->seed = s;
    } else if (qf_cli_args_value(a, "--shuffle", NULL, &v)) {
        if (a->failed) return true;
        QF_TR_NEEDS(!strcmp(v, "on") || !strcmp(v, "off"), "--shuffle takes on or off, got '%s'", v);
        c->shuffle = strcmp(v, "on") == 0;
    } else if (qf_cli_args_value(a, "--log", NULL, &v)) {
        ta->log = v;
    } else if (qf_cli_args_value(a, "--plot", NULL, &v)) {
        ta->plot = v;
    } else if (!ta->in && qf_cli_args_positional(a, &v)) {
        ta->in = v;
    } else {
        return false;
    }
    return true;
#undef QF_TR_NEEDS
}

int qf_tr_check_args(const qf_cli_command *cmd, qf_tr_args *ta)
{
    const qf_train_config *c = &ta->c;
    if (!ta->in) return qf_cli_usage_error(cmd, "no input model given");
    if (!ta->out) return qf_cli_usage_error(cmd, "no output given (-o OUT.onnx)");
    if (!ta->ndata) return qf_cli_usage_error(cmd, "no training data given (--data X.npy)");
    if (!ta->labels) return qf_cli_usage_error(cmd, "no labels given (--labels Y.npy)");
    if ((ta->nval > 0) != (ta->val_labels != NULL))
        return qf_cli_usage_error(cmd, "validation needs both --val-data and --val-labels");
    if (ta->nval && ta->nval != ta->ndata)
        return qf_cli_usage_error(cmd, "%d --data but %d --val-data: give one of each per graph input", ta->ndata,
                                  ta->nval);
    if (c->optim.nesterov && c->optim.momentum <= 0) return qf_cli_usage_error(cmd, "--nesterov needs --momentum > 0");
    if (c->sched.kind == QF_SCHED_STEP && c->sched.step_size <= 0)
        return qf_cli_usage_error(cmd, "--schedule step needs --step-size S (steps between rate changes)");
    if (c->optim.kind != QF_OPTIM_SGD && (c->optim.momentum > 0 || c->optim.nesterov))
        return qf_cli_usage_error(cmd, "--momentum and --nesterov are options of --optimizer sgd");
    return qf_tr_split_freeze(cmd, ta);
}


/* The outputs (-o, --log, --plot), checked before any work. */
int qf_tr_outputs(const qf_tr_args *a, qf_cli_outputs *out)
{
    int rc = qf_cli_outputs_add(out, "output", a->out);
    if (rc == QF_EXIT_OK && a->log) rc = qf_cli_outputs_add(out, "--log", a->log);
    if (rc == QF_EXIT_OK && a->plot) rc = qf_cli_outputs_add(out, "--plot", a->plot);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(out, "the input model", a->in);
    for (int i = 0; rc == QF_EXIT_OK && i < a->ndata; i++) rc = qf_cli_outputs_input(out, "the data", a->data[i]);
    for (int i = 0; rc == QF_EXIT_OK && i < a->nval; i++)
        rc = qf_cli_outputs_input(out, "the validation data", a->val_data[i]);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(out, "the labels", a->labels);
    if (rc == QF_EXIT_OK && a->val_labels) rc = qf_cli_outputs_input(out, "the validation labels", a->val_labels);
    return rc;
}


/* --- data ------------------------------------------------------------------------------ */

/* Data files for the graph's inputs, opened (header checked), checked
 * against the inputs and scanned for NaN / Inf. */
static qf_status qf_tr_open_data(const qf_graph *g, const char *const *paths, int n, qf_npy_file **files,
                                 qf_npy_source **src)
{
    if (n != g->ninputs)
        return qf_error(QF_ERR_INVALID, "the model has %d input%s: give one --data (and --val-data) per input, got %d",
                        g->ninputs, g->ninputs == 1 ? "" : "s", n);
    for (int i = 0; i < n; i++) {
        qf_status st = qf_npy_open(paths[i], &files[i]);
        if (st != QF_OK) return qf_error_prefix(st, "data '%s': ", paths[i]);
        const qf_tensor *t = qf_npy_info(files[i]), *t0 = qf_npy_info(files[0]);
        st = qf_data_check(g->inputs[i], t);
        if (st != QF_OK) return qf_error_prefix(st, "data '%s': ", paths[i]);
        QF_TRY(qf_npy_check_finite("data", paths[i], g->inputs[i], files[i]));
        if (t->dims[0] != t0->dims[0])
            return qf_error(QF_ERR_SHAPE, "data '%s' holds %lld samples, '%s' %lld", paths[i], (long long)t->dims[0],
                            paths[0], (long long)t0->dims[0]);
    }
    return qf_npy_source_init(src, files, n);
}

/* Labels for n samples: class indices (int64, int32 or uint8; [n] or
 * [n, 1]) as int64 [n] for cross-entropy; float32 targets as they are for
 * MSE (qf_train checks their shape). */
static qf_status qf_tr_labels(const char *path, int64_t n, qf_loss_kind loss, qf_tensor *t)
{
    qf_status st = qf_npy_load(path, t);
    if (st != QF_OK) return qf_error_prefix(st, "labels '%s': ", path);
    char got[128];
    if (loss == QF_LOSS_MSE) {
        if (t->dtype != QF_DTYPE_F32)
            return qf_error(QF_ERR_INVALID, "labels '%s': dtype %s, expected float32 targets for --loss mse", path,
                            qf_dtype_name(t->dtype));
        if (t->ndim < 1 || t->dims[0] != n)
            return qf_error(QF_ERR_SHAPE, "labels '%s': shape %s, expected %lld targets (one per sample of the data)",
                            path, qf_shape_str(t->ndim, t->dims, got, sizeof got), (long long)n);
        return QF_OK;
    }
    if (t->dtype != QF_DTYPE_I64 && t->dtype != QF_DTYPE_I32 && t->dtype != QF_DTYPE_U8)
        return qf_error(QF_ERR_INVALID, "labels '%s': dtype %s, expected int64, int32 or uint8 class indices", path,
                        qf_dtype_name(t->dtype));
    if (!(t->ndim == 1 || (t->ndim == 2 && t->dims[1] == 1)) || t->dims[0] != n)
        return qf_error(QF_ERR_SHAPE, "labels '%s': shape %s, expected [%lld] (one label per sample of the data)", path,
                        qf_shape_str(t->ndim, t->dims, got, sizeof got), (long long)n);
    qf_tensor l;
    int64_t dims[1] = {n};
    QF_TRY(qf_tensor_init(&l, QF_DTYPE_I64, 1, dims));
    int64_t *p = l.data;
    for (int64_t i = 0; i < n; i++) p[i] = qf_tensor_get_i64(t, i);
    qf_tensor_free(t);
    *t = l;
    return QF_OK;
}


/* --- progress, log, plot ------------------------------------------------------------------ */

static void qf_tr_clear_bar(qf_tr_state *s)
{
    if (!s->bar_drawn) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    s->bar_drawn = false;
}

static qf_status qf_tr_on_step(void *ud, qf_train_step_info *info)
{
    qf_tr_state *s = ud;
    double now = qf_clock_seconds();
    if (s->nsteps == s->cap_steps) {
        int64_t cap = s->cap_steps ? 2 * s->cap_steps : 1024;
        qf_tr_step *p = qf_realloc(s->steps, sizeof *p * (size_t)cap);
        if (!p) return QF_ERR_NOMEM;
        s->steps = p;
        s->cap_steps = cap;
    }
    s->steps[s->nsteps++] = (qf_tr_step){.step = info->step, .epoch = info->epoch, .lr = info->lr,
                                         .loss = info->loss, .acc = info->accuracy, .t = now - s->t0};
    s->last_lr = info->lr;
    int64_t in_epoch = info->step - (int64_t)info->epoch * info->steps_per_epoch;
    if (s->bar && (now - s->last_bar >= 0.1 || in_epoch == info->steps_per_epoch)) {
        double rate = (double)s->nsteps / (now - s->t0 > 1e-9 ? now - s->t0 : 1e-9);
        double eta = (double)(info->total_steps - info->step) / rate;
        fprintf(stderr, "\rEpoch %d/%d  step %lld/%lld  loss %.4f", info->epoch + 1, s->a->c.epochs,
                (long long)in_epoch, (long long)info->steps_per_epoch, info->loss);
        if (info->accuracy >= 0) fprintf(stderr, "  acc %5.1f %%", 100 * info->accuracy);
        fprintf(stderr, "  %.1f steps/s  ETA %d:%02d\033[K", rate, (int)(eta / 60), (int)fmod(eta, 60));
        fflush(stderr);
        s->last_bar = now;
        s->bar_drawn = true;
    }
    return qf_tr_stop ? qf_error(QF_ERR_INTERRUPTED, "interrupted") : QF_OK;
}

static qf_status qf_tr_on_epoch(void *ud, const qf_train_epoch_info *e)
{
    qf_tr_state *s = ud;
    qf_tr_clear_bar(s);
    qf_tr_epoch *p = qf_realloc(s->epochs, sizeof *p * (size_t)(s->nepochs + 1));
    if (!p) return QF_ERR_NOMEM;
    s->epochs = p;
    p[s->nepochs++] = (qf_tr_epoch){.epoch = e->epoch, .step = s->nsteps ? s->steps[s->nsteps - 1].step : 0,
                                    .lr = s->last_lr, .loss = e->train_loss, .acc = e->train_accuracy,
                                    .val_loss = e->val_loss, .val_acc = e->val_accuracy, .t = qf_clock_seconds() - s->t0};
    printf("epoch %d/%d: train loss %.6f", e->epoch + 1, s->a->c.epochs, e->train_loss);
    if (e->train_accuracy >= 0) printf(" acc %.2f %%", 100 * e->train_accuracy);
    if (s->a->nval) {
        printf(", val loss %.6f", e->val_loss);
        if (e->val_accuracy >= 0) printf(" acc %.2f %%", 100 * e->val_accuracy);
    }
    printf(", %.1f s\n", e->seconds);
    fflush(stdout);
    return qf_tr_stop ? qf_error(QF_ERR_INTERRUPTED, "interrupted") : QF_OK;
}

/* A number for the CSV: empty when the figure does not exist (< 0). */
static void qf_tr_csv_num(qf_strbuf *b, double x, bool exists)
{
    if (exists) qf_strbuf_printf(b, ",%.9g", x);
    else qf_strbuf_puts(b, ",");
}

/* The curve as CSV, one row per optimizer step and one per epoch:
 *   kind          step | epoch
 *   epoch         1-based
 *   step          optimizer steps so far (1-based; an epoch row: the epoch's last)
 *   lr            the learning rate of the step (an epoch row: of its last step)
 *   loss          the batch's mean loss (epoch: the mean over the epoch's samples)
 *   accuracy      top-1 of the batch / the epoch, 0 to 1 (empty for --loss mse)
 *   val_loss, val_accuracy   epoch rows with validation data (else empty)
 *   seconds       since training started */
static void qf_tr_csv(const qf_tr_state *s, qf_strbuf *b)
{
    qf_strbuf_puts(b, "kind,epoch,step,lr,loss,accuracy,val_loss,val_accuracy,seconds\n");
    int e = 0;
    for (int64_t i = 0; i <= s->nsteps; i++) {
        /* An epoch's row follows its last step. */
        while (e < s->nepochs && (i == s->nsteps || s->steps[i].step > s->epochs[e].step)) {
            const qf_tr_epoch *p = &s->epochs[e++];
            qf_strbuf_printf(b, "epoch,%d,%lld,%.9g,%.9g", p->epoch + 1, (long long)p->step, p->lr, p->loss);
            qf_tr_csv_num(b, p->acc, p->acc >= 0);
            qf_tr_csv_num(b, p->val_loss, s->a->nval > 0);
            qf_tr_csv_num(b, p->val_acc, s->a->nval > 0 && p->val_acc >= 0);
            qf_strbuf_printf(b, ",%.3f\n", p->t);
        }
        if (i == s->nsteps) break;
        const qf_tr_step *p = &s->steps[i];
        qf_strbuf_printf(b, "step,%d,%lld,%.9g,%.9g", p->epoch + 1, (long long)p->step, p->lr, p->loss);
        qf_tr_csv_num(b, p->acc, p->acc >= 0);
        qf_strbuf_printf(b, ",,,%.3f\n", p->t);
    }
}

/* --- the SVG chart: loss above, accuracy below, optimizer steps across ---- */

typedef struct qf_tr_panel {
    double x0, y0, w, h;     /* plot area in px */
    double xmax, ymin, ymax; /* data ranges */
} qf_tr_panel;

static double qf_tr_px(const qf_tr_panel *p, double x) { return p->x0 + p->w * x / p->xmax; }
static double qf_tr_py(const qf_tr_panel *p, double y)
{
    double f = (y - p->ymin) / (p->ymax - p->ymin);
    return p->y0 + p->h * (1 - (f < 0 ? 0 : f > 1 ? 1 : f));
}

static void qf_tr_svg_axes(qf_strbuf *b, const qf_tr_panel *p, const char *title, bool percent)
{
    qf_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
                     p->x0, p->y0, p->w, p->h);
    qf_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", p->x0,
                     p->y0 - 8, title);
    for (int k = 0; k <= 4; k++) {
        double y = p->ymin + (p->ymax - p->ymin) * k / 4, py = qf_tr_py(p, y);
        qf_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", p->x0, py,
                         p->x0 + p->w, py);
        if (percent)
            qf_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f %%</text>\n", p->x0 - 6, py + 4,
                             100 * y);
        else
            qf_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", p->x0 - 6, py + 4, y);
    }
    for (int k = 0; k <= 5; k++) {
        double x = p->xmax * k / 5, px = qf_tr_px(p, x);
        qf_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px, p->y0 + p->h + 16,
                         x);
    }
    qf_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", p->x0 + p->w / 2,
                     p->y0 + p->h + 32);
}

/* The step curve of field `acc` (else loss), averaged over buckets so that
 * it has at most QF_TR_PLOT_POINTS points. */
static void qf_tr_svg_steps(qf_strbuf *b, const qf_tr_panel *p, const qf_tr_state *s, bool acc, const char *color)
{
    if (!s->nsteps) return;
    int64_t per = (s->nsteps + QF_TR_PLOT_POINTS - 1) / QF_TR_PLOT_POINTS;
    qf_strbuf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1\" points=\"", color);
    for (int64_t i = 0; i < s->nsteps; i += per) {
        double sx = 0, sy = 0;
        int64_t m = 0;
        for (int64_t k = i; k < i + per && k < s->nsteps; k++, m++) {
            sx += (double)s->steps[k].step;
            sy += acc ? s->steps[k].acc : s->steps[k].loss;
        }
        qf_strbuf_printf(b, "%.1f,%.1f ", qf_tr_px(p, sx / (double)m), qf_tr_py(p, sy / (double)m));
    }
    qf_strbuf_puts(b, "\"/>\n");
}

/* An epoch curve (train or validation, loss or accuracy) with its points. */
static void qf_tr_svg_epochs(qf_strbuf *b, const qf_tr_panel *p, const qf_tr_state *s, bool val, bool acc,
                             const char *color)
{
    if (!s->nepochs) return;
    qf_strbuf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
    for (int e = 0; e < s->nepochs; e++) {
        const qf_tr_epoch *q = &s->epochs[e];
        double y = val ? (acc ? q->val_acc : q->val_loss) : (acc ? q->acc : q->loss);
        qf_strbuf_printf(b, "%.1f,%.1f ", qf_tr_px(p, (double)q->step), qf_tr_py(p, y));
    }
    qf_strbuf_puts(b, "\"/>\n");
    for (int e = 0; e < s->nepochs; e++) {
        const qf_tr_epoch *q = &s->epochs[e];
        double y = val ? (acc ? q->val_acc : q->val_loss) : (acc ? q->acc : q->loss);
        qf_strbuf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", qf_tr_px(p, (double)q->step),
                         qf_tr_py(p, y), color);
    }
}

static void qf_tr_svg_legend(qf_strbuf *b, double x, double y, const char *color, const char *label)
{
    qf_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", x,
                     y - 4, x + 18, y - 4, color);
    qf_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x + 24, y, label);
}

static void qf_tr_svg(const qf_tr_state *s, qf_strbuf *b)
{
    bool val = s->a->nval > 0, acc = s->a->c.loss == QF_LOSS_CROSS_ENTROPY;
    double W = 760, H = acc ? 600 : 330;
    int64_t last = s->nsteps ? s->steps[s->nsteps - 1].step : 1;
    qf_tr_panel lp = {.x0 = 70, .y0 = 40, .w = 560, .h = 230, .xmax = last > 0 ? (double)last : 1};
    /* The loss axis from 0 (or the lowest loss, if negative) to the highest. */
    lp.ymin = 0, lp.ymax = 0;
    for (int64_t i = 0; i < s->nsteps; i++) {
        if (s->steps[i].loss > lp.ymax) lp.ymax = s->steps[i].loss;
        if (s->steps[i].loss < lp.ymin) lp.ymin = s->steps[i].loss;
    }
    for (int e = 0; val && e < s->nepochs; e++)
        if (s->epochs[e].val_loss > lp.ymax) lp.ymax = s->epochs[e].val_loss;
    if (!(lp.ymax > lp.ymin) || !isfinite(lp.ymax)) lp.ymax = lp.ymin + 1;
    qf_strbuf_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                        "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n"
                        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                     W, H, W, H);
    qf_tr_svg_axes(b, &lp, "loss", false);
    qf_tr_svg_steps(b, &lp, s, false, "#9ecae1");
    qf_tr_svg_epochs(b, &lp, s, false, false, "#08519c");
    if (val) qf_tr_svg_epochs(b, &lp, s, true, false, "#e6550d");
    qf_tr_svg_legend(b, 645, 60, "#9ecae1", "train (step)");
    qf_tr_svg_legend(b, 645, 78, "#08519c", "train (epoch)");
    if (val) qf_tr_svg_legend(b, 645, 96, "#e6550d", "validation");
    if (acc) {
        qf_tr_panel ap = lp;
        ap.y0 = 340;
        ap.ymin = 0, ap.ymax = 1;
        qf_tr_svg_axes(b, &ap, "top-1 accuracy", true);
        qf_tr_svg_steps(b, &ap, s, true, "#a1d99b");
        qf_tr_svg_epochs(b, &ap, s, false, true, "#006d2c");
        if (val) qf_tr_svg_epochs(b, &ap, s, true, true, "#e6550d");
        qf_tr_svg_legend(b, 645, 360, "#a1d99b", "train (step)");
        qf_tr_svg_legend(b, 645, 378, "#006d2c", "train (epoch)");
        if (val) qf_tr_svg_legend(b, 645, 396, "#e6550d", "validation");
    }
    qf_strbuf_puts(b, "</svg>\n");
}



qf_status qf_tr_stage_logs(const qf_tr_args *a, const qf_tr_state *s, qf_cli_outputs *out, int *wi)
{
    qf_status st = QF_OK;
    for (int k = 0; k < 2 && st == QF_OK; k++) {
        if (!(k == 0 ? a->log : a->plot)) continue;
        qf_strbuf b = {0};
        if (k == 0) qf_tr_csv(s, &b);
        else qf_tr_svg(s, &b);
        size_t len = 0;
        char *text = qf_strbuf_take(&b, &len);
        const char *tmp = NULL;
        st = text ? qf_cli_outputs_stage(out, ++*wi, &tmp) : QF_ERR_NOMEM;
        if (st == QF_OK) st = qf_file_write_atomic(tmp, text, len);
        qf_free(text);
        qf_strbuf_free(&b);
    }
    return st;
}

/* --- loading ----------------------------------------------------------------------------- */

qf_status qf_tr_load(const qf_tr_args *a, qf_tr_state *s)
{
    QF_TRY(qf_onnx_load(a->in, &s->g));
    QF_TRY(qf_tr_open_data(s->g, a->data, a->ndata, s->files, &s->src));
    int64_t n = qf_npy_info(s->files[0])->dims[0];
    QF_TRY(qf_tr_labels(a->labels, n, a->c.loss, &s->labels));
    if (a->nval) {
        QF_TRY(qf_tr_open_data(s->g, a->val_data, a->nval, s->vfiles, &s->vsrc));
        QF_TRY(qf_tr_labels(a->val_labels, qf_npy_info(s->vfiles[0])->dims[0], a->c.loss, &s->val_labels));
    }
    return QF_OK;
}


/* --- a run: callbacks on, Ctrl-C caught ------------------------------------------------ */

void qf_tr_begin(qf_tr_state *s, qf_train_config *c)
{
    c->on_step = qf_tr_on_step;
    c->on_epoch = qf_tr_on_epoch;
    c->ud = s;
    s->bar = isatty(STDERR_FILENO);
    s->t0 = qf_clock_seconds();
    qf_tr_stop = 0;
    qf_tr_catch_sigint();
}

void qf_tr_end(qf_tr_state *s)
{
    qf_tr_release_sigint();
    qf_tr_clear_bar(s);
}

bool qf_tr_interrupted(void)
{
    return qf_tr_stop != 0;
}

void qf_tr_state_free(qf_tr_state *s)
{
    qf_graph_free(s->g);
    qf_npy_source_free(s->src);
    qf_npy_source_free(s->vsrc);
    for (int i = 0; i < QF_TR_MAX_DATA; i++) {
        qf_npy_close(s->files[i]);
        qf_npy_close(s->vfiles[i]);
    }
    qf_tensor_free(&s->labels);
    qf_tensor_free(&s->val_labels);
    qf_free(s->steps);
    qf_free(s->epochs);
    memset(s, 0, sizeof *s);
}

void qf_tr_args_free(qf_tr_args *a)
{
    qf_free(a->freeze_buf);
    a->freeze_buf = NULL;
}
