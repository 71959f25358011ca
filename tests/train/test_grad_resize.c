/* Resize's backward kernel (src/ops/ref/resize.c) by central differences.
 *
 * For fixed geometry Resize is a linear map of X (nearest copies, linear
 * weighs with weights that do not depend on X), so central differences with
 * eps 1e-2 are exact up to the rounding of the upstream-weighted sum, far
 * below the tolerance (1e-2 relative, 1e-3 absolute). Every coordinate mode
 * and nearest_mode, up and down by sizes (scales: grad_torch_resize.py). */
#include <stdio.h>

#include "grad_node.h"

static const qf_gradcheck_opts lin = {.eps = 1e-2};

static void resize_case(const qf_tensor *x, const char *mode, const char *coord,
                        const char *nearest, const grad_slot *sizes)
{
    grad_slot sl[4] = {GS_IN(x), GS_NONE, GS_NONE, *sizes};
    qf_node_runner r;
    grad_node(&r, QF_OP_RESIZE, 13, 4, sl, 1);
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "mode", mode));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "coordinate_transformation_mode", coord));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "nearest_mode", nearest));
    char what[160];
    snprintf(what, sizeof what, "Resize %s %s %s to [%lld, %lld]", mode, coord, nearest,
             (long long)sizes->iv[2], (long long)sizes->iv[3]);
    grad_run_check(&r, 0, false, &lin, what);
}

static void test_resize(void)
{
    const int64_t d[] = {2, 3, 4, 5};
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, d));
    grad_fill(&x, 1.0f);
    const char *coords[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                            "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"};
    const char *nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    const grad_slot sizes[] = {GS_I64(2, 3, 8, 7), GS_I64(2, 3, 3, 2), GS_I64(2, 3, 1, 9)};
    for (int c = 0; c < 6; c++)
        for (int s = 0; s < 3; s++) {
            for (int m = 0; m < 4; m++)
                resize_case(&x, "nearest", coords[c], nearest[m], &sizes[s]);
            if (c != 4)
                resize_case(&x, "linear", coords[c], "floor",
                            &sizes[s]); /* tf_..._for_nn: nearest's */
        }
    qf_tensor_free(&x);
}

int main(void)
{
    RUN(test_resize);
    return qf_check_report();
}
