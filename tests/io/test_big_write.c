/* Writing a big model: past its first few MiB the file writer bypasses the
 * page cache (O_DIRECT, src/io/file.c), and that path must write the same
 * bytes and fail the same way as the buffered one.
 *
 *   test_big_write MODELS_DIR WORKDIR
 *
 * - same_bytes: resnet18 (45 MB, from the ref_models fixture) loaded and
 *   saved comes back as the same graph, saved again byte for byte the same
 *   file; where the file system takes O_DIRECT, the middle of the file is
 *   not in the page cache after the save (the direct path was taken: a
 *   test of what it is for, not only of what it writes).
 * - size_limit: a save that hits the file size limit (RLIMIT_FSIZE, the
 *   same failure as a full disk) in the direct part fails with an I/O
 *   error, leaves no temporary file and the old file as it was. The direct
 *   writes are the writer thread's (src/io/file.c): its error reaches the
 *   caller, once, with its message. Twice: the limit on a 4 KiB boundary
 *   (a short direct write) and off one (the direct write refused, the rest
 *   through the page cache up to the limit).
 * - writer_pieces: the file writer itself, pieces of odd sizes past the
 *   direct threshold (the ring of buffers wraps around many times, the last
 *   buffer partial, then whole): the file holds exactly what was put.
 * - writer_fail: an error of the caller while the thread has writes in
 *   flight, an abort, and the thread's own error (the file size limit hit
 *   by whole buffers only): the first error comes back from commit, no
 *   temporary file stays, the old file is kept, the thread is joined (the
 *   sanitizer build finds a leaked thread or buffer).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/io_internal.h"
#include "qfold/io.h"
#include "io_test_files.h"
#include "tools/qf_check.h"

static const char *models_dir, *work_dir;

/* Whether this directory's file system takes an aligned O_DIRECT write. */
static bool direct_io_works(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/direct_probe", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0) return false;
    void *b = NULL;
    bool ok = posix_memalign(&b, 4096, 4096) == 0;
    if (ok) {
        memset(b, 0, 4096);
        ok = write(fd, b, 4096) == 4096;
    }
    free(b);
    close(fd);
    unlink(p);
    return ok;
}

/* Pages of [from, to) of the file that are in the page cache. */
static long resident_pages(const char *path, size_t from, size_t to)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    long pg = sysconf(_SC_PAGESIZE), n = 0;
    void *m = mmap(NULL, to, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return -1;
    size_t np = (to + (size_t)pg - 1) / (size_t)pg;
    unsigned char *v = malloc(np);
    if (v && mincore(m, to, v) == 0) {
        for (size_t i = from / (size_t)pg; i < np; i++) n += v[i] & 1;
    } else {
        n = -1;
    }
    free(v);
    munmap(m, to);
    return n;
}

static int count_temps(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".qfold-tmp-") != NULL;
    closedir(d);
    return n;
}

/* After a failed save: no temporary file left in dir, and out still holds
 * exactly `old` (nothing lost). */
static void check_nothing_lost(const char *dir, const char *out, const void *old, size_t old_size)
{
    CHECKF(count_temps(dir) == 0, "temporary files left in %s", dir);
    void *d = NULL;
    size_t n = 0;
    CHECKF(read_bytes(out, &d, &n) && n == old_size && memcmp(d, old, n) == 0, "the old file changed or is gone");
    qf_free(d);
}

static void same_bytes(void)
{
    char in[4096], a[4096], b[4096];
    snprintf(in, sizeof in, "%s/resnet18.onnx", models_dir);
    snprintf(a, sizeof a, "%s/resnet18.a.onnx", work_dir);
    snprintf(b, sizeof b, "%s/resnet18.b.onnx", work_dir);
    qf_graph *g = NULL, *g2 = NULL;
    CHECK_OK(qf_onnx_load(in, &g));
    if (!g) return;
    CHECK_OK(qf_onnx_save(g, a));
    struct stat sa;
    if (stat(a, &sa) != 0)
        FAIL("%s was not written", a);
    else if (direct_io_works(work_dir)) {
        /* Before anything reads it back: the writer goes direct from 4 MiB
         * on and writes its last partial buffer (< 1 MiB) through the page
         * cache; in between, nothing is cached. */
        long r = resident_pages(a, (size_t)8 << 20, (size_t)sa.st_size - ((size_t)2 << 20));
        CHECKF(r == 0, "%ld pages of the middle of the saved model are in the page cache", r);
    } else {
        printf("note: no O_DIRECT on %s; the page-cache check is skipped\n", work_dir);
    }
    CHECK_OK(qf_onnx_load(a, &g2));
    if (g2) {
        /* Every constant's bytes come back (the graph round-trips). */
        int checked = 0;
        for (int i = 0; i < g->nvalues; i++) {
            const qf_value *v = g->values[i];
            if (!v || !qf_value_is_const(v)) continue;
            const qf_value *w = qf_graph_find_value(g2, v->name);
            size_t nb = qf_tensor_nbytes(&v->type);
            CHECKF(w && qf_value_is_const(w) && qf_tensor_nbytes(&w->type) == nb &&
                       memcmp(v->type.data, w->type.data, nb) == 0,
                   "constant '%s' differs after the save", v->name);
            checked++;
        }
        CHECKF(checked > 50, "only %d constants", checked);
        CHECK_OK(qf_onnx_save(g2, b));
        qf_graph_free(g2);
    }
    qf_graph_free(g);
    CHECKF(same_file(a, b), "saved twice, the model differs");
    remove(a);
    remove(b);
}

static void size_limit_at(size_t limit)
{
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/resnet18.onnx", models_dir);
    snprintf(out, sizeof out, "%s/limited/resnet18.onnx", work_dir);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/limited", work_dir);
    mkdir(dir, 0755);
    static const char old[] = "the old file";
    CHECK_OK(qf_file_write_atomic(out, old, sizeof old));
    qf_graph *g = NULL;
    CHECK_OK(qf_onnx_load(in, &g));
    if (!g) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The direct writes have begun (from 4 MiB on). */
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
        setrlimit(RLIMIT_FSIZE, &rl);
        qf_status st = qf_onnx_save(g, out);
        const char *msg = qf_error_message();
        /* The thread's message, copied to this one: "cannot write
         * '...resnet18.onnx': File too large", and said once. */
        const char *name = msg ? strstr(msg, "resnet18.onnx") : NULL;
        bool ok = st == QF_ERR_IO && name && strstr(msg, strerror(EFBIG)) &&
                  !strstr(name + 1, "resnet18.onnx");
        if (!ok) fprintf(stderr, "status %d: %s\n", (int)st, msg ? msg : "(none)");
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECKF(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
               WEXITSTATUS(status) == 0,
           "the save over the size limit did not fail with an I/O error naming the file");
    qf_graph_free(g);
    check_nothing_lost(dir, out, old, sizeof old);
    remove(out);
    rmdir(dir);
}

static void size_limit(void)
{
    size_limit_at((size_t)12 << 20);
    size_limit_at(((size_t)12 << 20) + 1000);
}

/* Byte i of the test stream. */
static unsigned char pattern(size_t i) { return (unsigned char)((i * 2654435761u) >> 13); }

/* Put `total` bytes of the pattern in pieces of sizes cycling through
 * `sizes` (0 stops early: after `total` bytes or on an error). */
static void put_pattern(qf_file_writer *w, size_t total)
{
    static const size_t sizes[] = {1, 4095, 70000, 1 << 20, 3 << 20, 17, 999999, 5 << 20};
    unsigned char *buf = malloc((size_t)5 << 20);
    if (!buf) {
        FAIL("out of memory");
        return;
    }
    size_t pos = 0;
    for (int k = 0; pos < total; k++) {
        size_t n = sizes[k % (int)(sizeof sizes / sizeof *sizes)];
        if (n > total - pos) n = total - pos;
        for (size_t i = 0; i < n; i++) buf[i] = pattern(pos + i);
        qf_file_writer_put(w, buf, n);
        pos += n;
    }
    free(buf);
}

static void writer_pieces(void)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/pieces.bin", work_dir);
    /* Partial last buffer, then a whole one (commit waits for the thread
     * to write what it only queued). */
    const size_t totals[] = {((size_t)37 << 20) + 12345, (size_t)24 << 20, (size_t)3 << 20};
    for (int t = 0; t < 3; t++) {
        qf_file_writer w;
        CHECK_OK(qf_file_writer_open(&w, out, (size_t)1 << 20));
        put_pattern(&w, totals[t]);
        CHECK_OK(qf_file_writer_commit(&w));
        void *d = NULL;
        size_t n = 0;
        if (!read_bytes(out, &d, &n)) continue;
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (((unsigned char *)d)[i] != pattern(i)) bad = i;
        CHECKF(n == totals[t] && bad == n, "%zu bytes put, %zu in the file, first wrong at %zu",
               totals[t], n, bad);
        qf_free(d);
    }
    CHECKF(count_temps(work_dir) == 0, "temporary files left in %s", work_dir);
    remove(out);
}

static void writer_fail(void)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/failed.bin", work_dir);
    static const char old[] = "the old file";
    CHECK_OK(qf_file_write_atomic(out, old, sizeof old));
    for (int abort_it = 0; abort_it < 2; abort_it++) {
        qf_file_writer w;
        CHECK_OK(qf_file_writer_open(&w, out, (size_t)1 << 20));
        put_pattern(&w, (size_t)20 << 20); /* the thread is writing by now */
        if (abort_it) {
            qf_file_writer_abort(&w);
        } else {
            qf_file_writer_fail(&w, qf_error(QF_ERR_INVALID, "the caller's error"));
            put_pattern(&w, (size_t)3 << 20); /* ignored */
            CHECK_ERR(qf_file_writer_commit(&w), QF_ERR_INVALID, "the caller's error");
        }
        check_nothing_lost(work_dir, out, old, sizeof old);
    }
    /* Whole buffers only, over the file size limit: every write past 4 MiB
     * is the thread's, so only its error can make commit fail. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {(rlim_t)12 << 20, (rlim_t)12 << 20};
        setrlimit(RLIMIT_FSIZE, &rl);
        qf_file_writer w;
        if (qf_file_writer_open(&w, out, (size_t)1 << 20) != QF_OK) _exit(3);
        put_pattern(&w, (size_t)24 << 20);
        qf_status st = qf_file_writer_commit(&w);
        const char *msg = qf_error_message();
        bool ok = st == QF_ERR_IO && strstr(msg, "failed.bin") && strstr(msg, strerror(EFBIG));
        if (!ok) fprintf(stderr, "status %d: %s\n", (int)st, msg);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECKF(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
               WEXITSTATUS(status) == 0,
           "the writer thread's error did not come back from commit");
    check_nothing_lost(work_dir, out, old, sizeof old);
    remove(out);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_big_write MODELS_DIR WORKDIR\n");
        return 2;
    }
    models_dir = argv[1];
    work_dir = argv[2];
    RUN(same_bytes);
    RUN(size_limit);
    RUN(writer_pieces);
    RUN(writer_fail);
    return qf_check_report();
}
