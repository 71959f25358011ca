/* Optimizers, schedules and clipping (src/train/optim.c, schedule.c) on
 * few-step cases worked out by hand (tests/train/optim_torch.py compares
 * longer runs with torch.optim); bad configurations; every allocation
 * failure of qf_optim_init comes back as QF_ERR_NOMEM without a leak. */
#include <math.h>
#include <stdio.h>

#include "qfold/train.h"
#include "tools/qf_check.h"

#define QF_TEST_PI 3.14159265358979323846
#define CHECK_NEAR(got, want, tol) \
    CHECKF(fabs((double)(got) - (want)) <= (tol), "%s = %.9g, expected %.9g", #got, (double)(got), (double)(want))

typedef struct two {
    qf_tensor p, g;
} two;

/* param p0 and gradient g0, one element each */
static void two_init(two *t, float p0, float g0)
{
    int64_t d[] = {1};
    REQUIRE_OK(qf_tensor_init(&t->p, QF_DTYPE_F32, 1, d));
    REQUIRE_OK(qf_tensor_init(&t->g, QF_DTYPE_F32, 1, d));
    ((float *)t->p.data)[0] = p0;
    ((float *)t->g.data)[0] = g0;
}

static void two_free(two *t)
{
    qf_tensor_free(&t->p);
    qf_tensor_free(&t->g);
}

static float val(const qf_tensor *t) { return ((const float *)t->data)[0]; }

/* Steps of SGD with gradient g = 1 from p = 1 at lr 0.1; want[i] after step i. */
static void sgd_case(double momentum, double dampening, bool nesterov, double wd, float g, const double *want, int steps)
{
    two t;
    two_init(&t, 1.0f, g);
    qf_optim_config c = {.kind = QF_OPTIM_SGD, .lr = 0.1, .momentum = momentum, .dampening = dampening,
                         .nesterov = nesterov, .weight_decay = wd};
    qf_optimizer *o;
    qf_tensor *ps[] = {&t.p};
    const qf_tensor *gs[] = {&t.g};
    REQUIRE_OK(qf_optim_init(&o, &c, 1, ps));
    for (int s = 0; s < steps; s++) {
        CHECK_OK(qf_optim_step(o, gs, c.lr));
        CHECKF(fabs(val(&t.p) - want[s]) < 1e-6, "sgd m %g d %g n %d wd %g step %d: %.9g, expected %.9g", momentum,
               dampening, nesterov, wd, s + 1, val(&t.p), want[s]);
    }
    qf_optim_free(o);
    two_free(&t);
}

static void test_sgd(void)
{
    const double plain[] = {0.95, 0.9};               /* p -= 0.1 * 0.5 */
    sgd_case(0, 0, false, 0, 0.5f, plain, 2);
    const double wd[] = {0.94};                       /* d = 0.5 + 0.1 * 1 */
    sgd_case(0, 0, false, 0.1, 0.5f, wd, 1);
    const double mom[] = {0.9, 0.71, 0.439};          /* buf 1, 1.9, 2.71 */
    sgd_case(0.9, 0, false, 0, 1.0f, mom, 3);
    const double damp[] = {0.9, 0.76};                /* buf 1 (no dampening at first), 0.9 + 0.5 */
    sgd_case(0.9, 0.5, false, 0, 1.0f, damp, 2);
    const double nest[] = {0.81, 0.539};              /* d = 1 + 0.9 buf: 1.9, 2.71 */
    sgd_case(0.9, 0, true, 0, 1.0f, nest, 2);
}

/* Adam's bias corrections make its first steps lr * sign(g) for a constant
 * gradient (m^ = g, v^ = g^2); a parameter frozen at step 1 (grad NULL) has
 * its own step count, so its first step is again lr * sign(g). */
static void test_adam(void)
{
    two a, b;
    two_init(&a, 1.0f, 0.5f);
    two_init(&b, 2.0f, -0.25f);
    qf_tensor *ps[] = {&a.p, &b.p};
    const qf_tensor *g1[] = {&a.g, NULL}, *g2[] = {&a.g, &b.g};
    qf_optim_config c = {.kind = QF_OPTIM_ADAM, .lr = 0.01};
    qf_optimizer *o;
    REQUIRE_OK(qf_optim_init(&o, &c, 2, ps));
    CHECK_OK(qf_optim_step(o, g1, 0.01));
    CHECK_NEAR(val(&a.p), 0.99, 1e-6);
    CHECK(val(&b.p) == 2.0f);
    CHECK_OK(qf_optim_step(o, g2, 0.01));
    CHECK_NEAR(val(&a.p), 0.98, 1e-6);
    CHECK_NEAR(val(&b.p), 2.01, 1e-6);
    qf_optim_free(o);

    /* AdamW: p *= 1 - lr * wd first (0.999), then the step; Adam's L2 only
     * changes the gradient (still positive: the step is lr). */
    ((float *)a.p.data)[0] = 1.0f;
    c.kind = QF_OPTIM_ADAMW;
    c.weight_decay = 0.1;
    REQUIRE_OK(qf_optim_init(&o, &c, 1, ps));
    CHECK_OK(qf_optim_step(o, g2, 0.01));
    CHECK_NEAR(val(&a.p), 0.989, 1e-6);
    qf_optim_free(o);
    ((float *)a.p.data)[0] = 1.0f;
    c.kind = QF_OPTIM_ADAM;
    REQUIRE_OK(qf_optim_init(&o, &c, 1, ps));
    CHECK_OK(qf_optim_step(o, g2, 0.01));
    CHECK_NEAR(val(&a.p), 0.99, 1e-6);
    /* second step, worked out: g = 0.5 + 0.1 * 0.99 = 0.599, m = 0.09 * 0.6 + 0.1 * 0.599,
     * v = 0.999 * 0.001 * 0.36 + 0.001 * 0.599^2, p -= 0.01 * (m / 0.19) / (sqrt(v / 0.001999) + 1e-8) */
    const double g = 0.5 + 0.1 * 0.99, m = 0.9 * 0.1 * 0.6 + 0.1 * g, v = 0.999 * 0.001 * 0.36 + 0.001 * g * g;
    CHECK_OK(qf_optim_step(o, g2, 0.01));
    CHECK_NEAR(val(&a.p), 0.99 - 0.01 * (m / 0.19) / (sqrt(v / (1 - 0.999 * 0.999)) + 1e-8), 1e-6);
    qf_optim_free(o);
    two_free(&a);
    two_free(&b);
}

static void test_clip(void)
{
    int64_t d[] = {1};
    qf_tensor a, b;
    REQUIRE_OK(qf_tensor_init(&a, QF_DTYPE_F32, 1, d));
    REQUIRE_OK(qf_tensor_init(&b, QF_DTYPE_F32, 1, d));
    ((float *)a.data)[0] = 3.0f;
    ((float *)b.data)[0] = -4.0f;
    qf_tensor *gs[] = {&a, NULL, &b};
    CHECK_NEAR(qf_clip_grad_norm(gs, 3, 10.0), 5.0, 1e-12); /* below the bound: unchanged */
    CHECK(val(&a) == 3.0f && val(&b) == -4.0f);
    CHECK_NEAR(qf_clip_grad_norm(gs, 3, 1.0), 5.0, 1e-12);
    CHECK_NEAR(val(&a), 3.0 / (5.0 + 1e-6), 1e-7);
    CHECK_NEAR(val(&b), -4.0 / (5.0 + 1e-6), 1e-7);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
}

static void test_schedules(void)
{
    qf_schedule s = {.kind = QF_SCHED_COSINE, .warmup = 4, .total = 4, .min_lr = 0.1};
    const double cw[] = {0.25, 0.5, 0.75, 1.0, 1.0, 0.1 + 0.9 * (1 + cos(QF_TEST_PI / 4)) / 2, 0.55, 0.1 + 0.9 * (1 + cos(3 * QF_TEST_PI / 4)) / 2, 0.1};
    for (int i = 0; i < 9; i++) CHECKF(fabs(qf_schedule_lr(&s, 1.0, i) - cw[i]) < 1e-15, "cosine+warmup step %d: %.17g", i, qf_schedule_lr(&s, 1.0, i));
    qf_schedule st = {.kind = QF_SCHED_STEP, .step_size = 3, .gamma = 0.5};
    const double sw[] = {2, 2, 2, 1, 1, 1, 0.5};
    for (int i = 0; i < 7; i++) CHECKF(qf_schedule_lr(&st, 2.0, i) == sw[i], "step step %d: %g", i, qf_schedule_lr(&st, 2.0, i));
    st.gamma = 0; /* torch's default 0.1 */
    CHECK_NEAR(qf_schedule_lr(&st, 2.0, 6), 0.02, 1e-15);
    qf_schedule k = {.kind = QF_SCHED_CONSTANT, .warmup = 2};
    CHECK(qf_schedule_lr(&k, 0.3, 0) == 0.15 && qf_schedule_lr(&k, 0.3, 1) == 0.3 && qf_schedule_lr(&k, 0.3, 99) == 0.3);
}

static void test_names_and_bad_configs(void)
{
    qf_optim_kind ok;
    qf_sched_kind sk;
    CHECK_OK(qf_optim_parse("adamw", &ok));
    CHECK(ok == QF_OPTIM_ADAMW && !strcmp(qf_optim_name(QF_OPTIM_SGD), "sgd"));
    CHECK_ERR(qf_optim_parse("rmsprop", &ok), QF_ERR_INVALID, "unknown optimizer 'rmsprop'");
    CHECK_OK(qf_sched_parse("cosine", &sk));
    CHECK(sk == QF_SCHED_COSINE && !strcmp(qf_sched_name(QF_SCHED_STEP), "step"));
    CHECK_ERR(qf_sched_parse("linear", &sk), QF_ERR_INVALID, "unknown schedule 'linear'");

    two t;
    two_init(&t, 1.0f, 1.0f);
    qf_tensor *ps[] = {&t.p};
    qf_optimizer *o = NULL;
    qf_optim_config c = {.kind = QF_OPTIM_SGD, .lr = 0};
    CHECK_ERR(qf_optim_init(&o, &c, 1, ps), QF_ERR_INVALID, "sgd: learning rate 0 must be > 0");
    c.lr = -0.1;
    CHECK_ERR(qf_optim_init(&o, &c, 1, ps), QF_ERR_INVALID, "learning rate -0.1");
    c.lr = 0.1;
    c.nesterov = true;
    CHECK_ERR(qf_optim_init(&o, &c, 1, ps), QF_ERR_INVALID, "Nesterov momentum needs momentum > 0");
    c.momentum = 0.9;
    c.dampening = 0.1;
    CHECK_ERR(qf_optim_init(&o, &c, 1, ps), QF_ERR_INVALID, "dampening 0");
    c = (qf_optim_config){.kind = QF_OPTIM_SGD, .lr = 0.1, .momentum = -0.5};
    CHECK_ERR(qf_optim_init(&o, &c, 1, ps), QF_ERR_INVALID, "momentum -0.5");
    c = (qf_optim_config){.kind = QF_OPTIM_ADAM, .lr = 0.1, .beta1 = 1.0, .beta2 = 0.999};
    CHECK_ERR(qf_optim_init(&o, &c, 1, ps), QF_ERR_INVALID, "adam: beta1 1 outside [0, 1)");
    c = (qf_optim_config){.kind = QF_OPTIM_ADAMW, .lr = 0.1, .weight_decay = -1};
    CHECK_ERR(qf_optim_init(&o, &c, 1, ps), QF_ERR_INVALID, "adamw: weight decay -1");
    CHECK(o == NULL);
    /* a gradient of another size */
    c = (qf_optim_config){.kind = QF_OPTIM_SGD, .lr = 0.1};
    REQUIRE_OK(qf_optim_init(&o, &c, 1, ps));
    int64_t d2[] = {2};
    qf_tensor g2;
    REQUIRE_OK(qf_tensor_init(&g2, QF_DTYPE_F32, 1, d2));
    const qf_tensor *gs[] = {&g2};
    CHECK_ERR(qf_optim_step(o, gs, 0.1), QF_ERR_SHAPE, "sgd: gradient 0 is float32 [2], its parameter float32 [1]");
    CHECK(val(&t.p) == 1.0f);
    qf_tensor_free(&g2);
    qf_optim_free(o);
    two_free(&t);
}

/* Every allocation of qf_optim_init failing in turn: NOMEM, nothing leaked. */
static void test_init_alloc_failures(void)
{
    two a, b;
    two_init(&a, 1.0f, 1.0f);
    two_init(&b, 1.0f, 1.0f);
    qf_tensor *ps[] = {&a.p, &b.p};
    qf_optim_config c = {.kind = QF_OPTIM_ADAM, .lr = 0.1};
    qf_check_alloc al;
    int failures = 0;
    for (long k = 1; k < 100; k++) {
        qf_check_count_allocs(&al);
        al.fail_at = k;
        qf_optimizer *o = NULL;
        qf_status st = qf_optim_init(&o, &c, 2, ps);
        qf_optim_free(o);
        long live = al.live, failed = al.failures;
        qf_set_allocator(NULL, NULL);
        CHECKF(live == 0, "allocation %ld failing: %ld blocks leaked", k, live);
        if (!failed) {
            CHECK(st == QF_OK);
            break;
        }
        CHECKF(st == QF_ERR_NOMEM, "allocation %ld failing: status %s", k, qf_status_name(st));
        failures++;
    }
    CHECK(failures >= 5);
    two_free(&a);
    two_free(&b);
}

int main(void)
{
    RUN(test_sgd);
    RUN(test_adam);
    RUN(test_clip);
    RUN(test_schedules);
    RUN(test_names_and_bad_configs);
    RUN(test_init_alloc_failures);
    return qf_check_report();
}
