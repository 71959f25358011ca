/* libFuzzer target: a .npy file from arbitrary bytes (qf_npy_load), and,
 * when it loads, the save / re-load round trip, which must give back the
 * same dtype, shape and bytes.
 *
 * qf_npy_load reads a path, so each input goes to a file in a private
 * directory (on tmpfs when there is one). Allocations go through a capped
 * hook as in fuzz_onnx.c: a header that declares a huge array must fail
 * cleanly, whatever the machine has.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qfold/io.h"
#include "fuzz_common.h"

static char fuzz_in[96], fuzz_out[96];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char dir[64];
    fuzz_setup("npy", dir, sizeof dir);
    snprintf(fuzz_in, sizeof fuzz_in, "%s/in.npy", dir);
    snprintf(fuzz_out, sizeof fuzz_out, "%s/out.npy", dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qf_error_clear();
    int fd = open(fuzz_in, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    close(fd);

    qf_tensor t;
    qf_status st = qf_npy_load(fuzz_in, &t);
    fuzz_check_failed(st);
    if (st == QF_OK) {
        st = qf_npy_save(fuzz_out, &t);
        fuzz_check_failed(st);
        if (st == QF_OK) {
            qf_tensor u;
            st = qf_npy_load(fuzz_out, &u);
            /* What qfold wrote it must read back, unchanged. */
            size_t nb = qf_tensor_nbytes(&t);
            if (st != QF_OK || u.dtype != t.dtype || !qf_shape_equal(u.ndim, u.dims, t.ndim, t.dims) ||
                (nb && memcmp(u.data, t.data, nb) != 0)) {
                fprintf(stderr, "npy round trip changed the array: %s\n", qf_error_message());
                abort();
            }
            qf_tensor_free(&u);
            unlink(fuzz_out);
        }
        qf_tensor_free(&t);
    }
    if (fuzz_live != 0) {
        fprintf(stderr, "%zu bytes still allocated through the hook\n", fuzz_live);
        abort();
    }
    return 0;
}
