/* What both fuzz targets share: a capped allocation hook, a private scratch
 * directory for the files the code under test writes, and the check that a
 * failure comes with a message.
 *
 * Every allocation goes through fuzz_alloc (installed by fuzz_setup): one
 * piece at most FUZZ_MAX_ALLOC, all live pieces at most FUZZ_MAX_LIVE, so a
 * file that declares a huge tensor fails as out of memory, as it would on a
 * small machine, instead of tripping libFuzzer's malloc limit.
 */
#ifndef QF_FUZZ_COMMON_H
#define QF_FUZZ_COMMON_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qfold/status.h"

#define FUZZ_MAX_ALLOC ((size_t)64 << 20)
#define FUZZ_MAX_LIVE ((size_t)256 << 20)
#define FUZZ_HDR 16 /* keeps the hook's blocks 16-byte aligned */

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
    if (nsize > FUZZ_MAX_ALLOC || fuzz_live - old + nsize > FUZZ_MAX_LIVE) return NULL;
    unsigned char *r = realloc(hdr, nsize + FUZZ_HDR);
    if (!r) return NULL;
    fuzz_live = fuzz_live - old + nsize;
    memcpy(r, &nsize, sizeof nsize);
    return r + FUZZ_HDR;
}

static char fuzz_dir[64];

/* At exit: the private directory and what the target left in it. */
static void fuzz_cleanup(void)
{
    DIR *d = opendir(fuzz_dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(fuzz_dir);
}

/* Install the hook and make a private directory (on tmpfs when there is
 * one: fsync is free there) named after `tag`, removed at exit; its path
 * goes to dir. */
static void fuzz_setup(const char *tag, char *dir, size_t size)
{
    qf_set_allocator(fuzz_alloc, NULL);
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/qf-fuzz-%s-%ld", base, tag, (long)getpid());
    snprintf(dir, size, "%s", fuzz_dir);
    if (mkdir(fuzz_dir, 0700) == 0) atexit(fuzz_cleanup);
}

/* A failure must come with a message. */
static void fuzz_check_failed(qf_status st)
{
    const char *m = qf_error_message();
    if (st != QF_OK && (!m || !*m)) {
        fprintf(stderr, "status %s without a message\n", qf_status_name(st));
        abort();
    }
    qf_error_clear();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
