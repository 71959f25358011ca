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

#define FUZZ_MAX_ALLOC ((size_t)64 << 20)
#define FUZZ_HDR 16

static size_t fuzz_live;

static void *fuzz_alloc(void *ud, void *ptr, size_t nsize)
{
    (void)ud;
    unsigned char *hdr = ptr ? (unsigned char *)ptr - FUZZ_HDR : NULL;
    size_t old = 0;
    if (hdr) memcpy(&old, hdr, sizeof old);
    if (nsize == 0) {
        fuzz_live -= old;
        free(hdr);
        return NULL;
    }
    if (nsize > FUZZ_MAX_ALLOC) return NULL;
    unsigned char *r = realloc(hdr, nsize + FUZZ_HDR);
    if (!r) return NULL;
    fuzz_live = fuzz_live - old + nsize;
    memcpy(r, &nsize, sizeof nsize);
    return r + FUZZ_HDR;
}

static char fuzz_in[64], fuzz_out[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    qf_set_allocator(fuzz_alloc, NULL);
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    char dir[48];
    snprintf(dir, sizeof dir, "%s/qf-fuzz-npy-%ld", base, (long)getpid());
    mkdir(dir, 0700);
    snprintf(fuzz_in, sizeof fuzz_in, "%s/in.npy", dir);
    snprintf(fuzz_out, sizeof fuzz_out, "%s/out.npy", dir);
    return 0;
}

static void fuzz_check_failed(qf_status st)
{
    const char *m = qf_error_message();
    if (st != QF_OK && (!m || !*m)) {
        fprintf(stderr, "status %s without a message\n", qf_status_name(st));
        abort();
    }
    qf_error_clear();
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
