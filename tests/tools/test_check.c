/* Tests of the check harness itself (tests/tools/qf_check.h): every kind of
 * check fails when it should and passes when it should, REQUIRE stops the
 * test case, and the counts behind the closing summary are right. The
 * deliberate failures print their messages to stderr; the program then
 * resets the counters and reports only its own verdicts. */
#include "tools/qf_check.h"

static int reached_after_require;

static void case_all_pass(void)
{
    CHECK(1 + 1 == 2);
    CHECKF(2 > 1, "never printed %d", 0);
    CHECK_OK(QF_OK);
    CHECK_STATUS(qf_error(QF_ERR_SHAPE, "node 'n0': bad shape [2, 3]"), QF_ERR_SHAPE);
    CHECK_MSG("[2, 3]");
    CHECK_ERR(qf_error(QF_ERR_INVALID, "node 'n1': axis 4 out of range"), QF_ERR_INVALID, "axis 4");
    REQUIRE(1, "never printed");
    REQUIRE_OK(QF_OK);
}

static void case_checkf_fails(void) { CHECKF(1 == 2, "1 is %d, 2 is %d", 1, 2); }

static void case_err_wrong_code(void)
{
    CHECK_ERR(qf_error(QF_ERR_SHAPE, "node 'n0': bad"), QF_ERR_INVALID, "bad");
}

static void case_err_wrong_message(void)
{
    CHECK_ERR(qf_error(QF_ERR_SHAPE, "node 'n0': bad"), QF_ERR_SHAPE, "axis");
}

static void case_err_but_ok(void) { CHECK_ERR(QF_OK, QF_ERR_SHAPE, ""); }

static void case_require_stops(void)
{
    reached_after_require = 0;
    REQUIRE(0 == 1, "precondition %s", "missing");
    reached_after_require = 1;
}

static void case_fail(void) { FAIL("%d of %d elements differ", 3, 8); }

static void case_require_ok_stops(void)
{
    reached_after_require = 0;
    REQUIRE_OK(qf_error(QF_ERR_IO, "cannot open 'x.onnx'"));
    reached_after_require = 1;
}

/* Run `fn`, which must fail with `nchecks` failed checks; returns 1 if it did. */
static int fails_with(void (*fn)(void), const char *name, long nchecks)
{
    int failed_before = qf_check_failed, passed_before = qf_check_passed;
    long checks_before = qf_check_nfailed_checks;
    qf_check_run(fn, name);
    return qf_check_failed == failed_before + 1 && qf_check_passed == passed_before &&
           qf_check_nfailed_checks - checks_before == nchecks;
}

int main(void)
{
    /* Phase 1: the harness judged on deliberate failures. */
    int verdict[8];
    fprintf(stderr, "--- deliberate failures follow ---\n");
    printf("--- deliberate failures follow ---\n");
    int passed_before = qf_check_passed;
    RUN(case_all_pass);
    verdict[0] = qf_check_passed == passed_before + 1 && qf_check_failed == 0;
    verdict[1] = fails_with(case_checkf_fails, "case_checkf_fails", 1);
    verdict[2] = fails_with(case_err_wrong_code, "case_err_wrong_code", 1);
    verdict[3] = fails_with(case_err_wrong_message, "case_err_wrong_message", 1);
    verdict[4] = fails_with(case_err_but_ok, "case_err_but_ok", 1);
    verdict[5] = fails_with(case_require_stops, "case_require_stops", 1) && !reached_after_require;
    verdict[6] =
        fails_with(case_require_ok_stops, "case_require_ok_stops", 1) && !reached_after_require;
    verdict[7] = fails_with(case_fail, "case_fail", 1);
    /* A check outside RUN counts as one more failed case in the summary. */
    CHECK(0 == 1);
    int failed_cases = qf_check_failed;
    long outside = qf_check_nfailed_checks - qf_check_nfailed_in_runs;
    fprintf(stderr, "--- end of deliberate failures ---\n");
    printf("--- end of deliberate failures ---\n");

    /* Phase 2: the verdicts, counted from zero. */
    qf_check_failed = qf_check_passed = 0;
    qf_check_nfailed_checks = qf_check_nfailed_in_runs = 0;
    static const char *const names[8] = {"all checks pass",           "CHECKF fails",
                                         "CHECK_ERR wrong status",    "CHECK_ERR wrong message",
                                         "CHECK_ERR on success",      "REQUIRE stops the case",
                                         "REQUIRE_OK stops the case", "FAIL fails"};
    for (int i = 0; i < 8; i++) {
        printf("%s harness: %s\n", verdict[i] ? "PASS" : "FAIL", names[i]);
        if (verdict[i])
            qf_check_passed++;
        else
            qf_check_failed++;
    }
    int outside_ok = failed_cases == 7 && outside == 1;
    printf("%s harness: a check outside RUN is counted\n", outside_ok ? "PASS" : "FAIL");
    if (outside_ok)
        qf_check_passed++;
    else
        qf_check_failed++;
    return qf_check_report();
}
