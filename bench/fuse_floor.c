/* What `qfold fuse`'s durable write costs on this machine with no model
 * work at all, next to `cp` (issue 12, bench/fuse.md): the floor under the
 * `<= 3x cp` goal, and what folding while writing could gain.
 *
 *   fuse_floor IN DIR [REPS]
 *
 * IN is a model file (say bench/.work/resnet50.onnx, warm in the page
 * cache), DIR a directory on the same file system as bench/fuse's outputs.
 * Each rep runs, in a child process of its own (fresh memory is what this
 * VM charges for) and in rotating order:
 *   copy    what `cp IN DIR/floor.copy` does: open the previous copy with
 *           O_TRUNC (freeing its blocks), copy_file_range into the page
 *           cache; no fsync.
 *   stream  the contract's I/O alone, as a fold done while writing would
 *           leave it: each 4 MiB of IN pread from the page cache into one
 *           reused buffer, every float scaled there (the fold's work), the
 *           buffer written with O_DIRECT to a temporary file; fsync, rename
 *           over the previous output (freeing its blocks), fsync of DIR.
 *   buffer  today's shape of `qfold fuse`: IN read whole into a fresh buffer
 *           (MADV_HUGEPAGE + MADV_POPULATE_WRITE), scaled in place, copied
 *           4 MiB at a time into the write buffer and written the same way.
 * and prints, per mode, the median (and fastest) time of each phase and of
 * the whole child (fork to exit); `replace` is the rename over the previous
 * output (copy: its O_TRUNC), which frees the old blocks. A first, untimed
 * round leaves the previous outputs in place. In both durable modes a
 * writer thread writes one 4 MiB buffer while the next is filled (qfold's
 * writer thread has a ring of four 1 MiB ones). Not a test and not part of
 * the library:
 * built by hand,
 *   cc -O2 -fvect-cost-model=dynamic -fno-trapping-math -std=c11 -pthread \
 *      bench/fuse_floor.c -o fuse_floor
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK    ((size_t)4 << 20)
#define MAX_REPS 64
enum { M_COPY, M_STREAM, M_BUFFER, NMODES };
enum { P_READ, P_WRITE, P_FSYNC, P_REPLACE, P_DIRSYNC, P_TOTAL, NPHASES };
static const char *const mode_name[NMODES] = {"copy", "stream", "buffer"};
static const char *const phase_name[NPHASES] = {"read",    "write",   "fsync",
                                                "replace", "dirsync", "total"};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void die(const char *what)
{
    fprintf(stderr, "fuse_floor: %s: %s\n", what, strerror(errno));
    _exit(1);
}

/* The fold's work on a buffer (4096-aligned here): every float scaled. It
 * vectorizes as qfold's fold does with qfold's flags (the build line). */
static void scale(unsigned char *p, size_t n)
{
    float *f = (float *)(void *)p;
    for (size_t i = 0; i < n / 4; i++) f[i] *= 1.0001f;
}

static void write_all(int fd, const void *p, size_t n)
{
    /* The last, partial chunk: through the page cache, as qfold's writer. */
    if (n % 4096) {
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl & ~O_DIRECT);
    }
    if (write(fd, p, n) != (ssize_t)n) die("write");
}

/* Two buffers: the caller fills one while the thread writes the other. */
typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *buf[2];
    size_t len[2];
    int fd, full[2], quit;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    for (int i = 0;; i ^= 1) {
        pthread_mutex_lock(&w->mu);
        while (!w->full[i] && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->full[i]) {
            pthread_mutex_unlock(&w->mu);
            return NULL;
        }
        pthread_mutex_unlock(&w->mu);
        write_all(w->fd, w->buf[i], w->len[i]);
        pthread_mutex_lock(&w->mu);
        w->full[i] = 0;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

/* The free buffer i (waiting for the thread to have written it). */
static unsigned char *writer_get(writer *w, int i)
{
    pthread_mutex_lock(&w->mu);
    while (w->full[i]) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    return w->buf[i];
}

static void writer_put(writer *w, int i, size_t len)
{
    pthread_mutex_lock(&w->mu);
    w->len[i] = len;
    w->full[i] = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void writer_start(writer *w, int fd)
{
    memset(w, 0, sizeof *w);
    w->fd = fd;
    for (int i = 0; i < 2; i++) {
        /* 2 MiB-aligned huge pages, as the model buffer's: on this VM the
         * kernel's first access to each 4 KB page of a user buffer (the
         * pread into it, the direct write from it) costs a fault of its
         * own even after the populate (11-25 ms per 4 MiB, 0.6-5 ms with
         * huge pages). */
        if (posix_memalign((void **)&w->buf[i], (size_t)2 << 20, CHUNK) != 0) die("posix_memalign");
        madvise(w->buf[i], CHUNK, MADV_HUGEPAGE);
        madvise(w->buf[i], CHUNK, MADV_POPULATE_WRITE);
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) die("pthread_create");
}

static void writer_finish(writer *w)
{
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
}

/* fsync, rename over the previous output, fsync of the directory. */
static void commit(int fd, const char *tmp, const char *out, const char *dir, double *ph)
{
    double t = now_ms();
    if (fsync(fd) != 0) die("fsync");
    close(fd);
    ph[P_FSYNC] = now_ms() - t;
    t = now_ms();
    if (rename(tmp, out) != 0) die("rename");
    ph[P_REPLACE] = now_ms() - t;
    t = now_ms();
    int d = open(dir, O_RDONLY);
    if (d < 0 || fsync(d) != 0) die("fsync of the directory");
    close(d);
    ph[P_DIRSYNC] = now_ms() - t;
}

static void run_mode(int mode, const char *in, const char *dir, double *ph)
{
    char out[4096], tmp[4096];
    snprintf(out, sizeof out, "%s/floor.%s", dir, mode == M_COPY ? "copy" : "out");
    snprintf(tmp, sizeof tmp, "%s/.floor.tmp", dir);
    int ifd = open(in, O_RDONLY);
    struct stat st;
    if (ifd < 0 || fstat(ifd, &st) != 0) die(in);
    size_t n = (size_t)st.st_size;
    if (mode == M_COPY) {
        double t = now_ms();
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) die(out);
        ph[P_REPLACE] = now_ms() - t; /* the truncate: the old copy's blocks freed */
        t = now_ms();
        for (ssize_t k; (k = copy_file_range(ifd, NULL, fd, NULL, 1 << 30, 0)) != 0;)
            if (k < 0) die("copy_file_range");
        ph[P_WRITE] = now_ms() - t;
        close(fd);
        return;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0) die(tmp);
    writer w;
    writer_start(&w, fd);
    double t = now_ms();
    unsigned char *b = NULL;
    if (mode == M_BUFFER) {
        size_t cap = (n + ((size_t)2 << 20)) & ~(((size_t)2 << 20) - 1);
        if (posix_memalign((void **)&b, (size_t)2 << 20, cap) != 0) die("posix_memalign");
        madvise(b, cap, MADV_HUGEPAGE);
        madvise(b, cap, MADV_POPULATE_WRITE);
        for (size_t o = 0; o < n;) {
            ssize_t k = read(ifd, b + o, n - o);
            if (k <= 0) die("read");
            o += (size_t)k;
        }
        scale(b, n);
        ph[P_READ] = now_ms() - t;
        t = now_ms();
    }
    for (size_t o = 0, i = 0; o < n; o += CHUNK, i ^= 1) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
        unsigned char *dst = writer_get(&w, (int)i);
        if (b) {
            memcpy(dst, b + o, k);
        } else {
            if (pread(ifd, dst, k, (off_t)o) != (ssize_t)k) die("pread");
            scale(dst, k);
        }
        writer_put(&w, (int)i, k);
    }
    writer_finish(&w);
    ph[P_WRITE] = now_ms() - t;
    commit(fd, tmp, out, dir, ph);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fuse_floor IN DIR [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 7;
    if (reps < 1 || reps > MAX_REPS) reps = 7;
    static double res[NMODES][NPHASES][MAX_REPS];
    for (int r = -1; r < reps; r++) {
        for (int i = 0; i < NMODES; i++) {
            int mode = (i + r + NMODES) % NMODES;
            int pfd[2];
            if (pipe(pfd) != 0) die("pipe");
            double t0 = now_ms();
            pid_t pid = fork();
            if (pid < 0) die("fork");
            if (pid == 0) {
                double ph[NPHASES] = {0};
                run_mode(mode, argv[1], argv[2], ph);
                if (write(pfd[1], ph, sizeof ph) != (ssize_t)sizeof ph) _exit(1);
                _exit(0);
            }
            close(pfd[1]);
            double ph[NPHASES] = {0};
            ssize_t got = read(pfd[0], ph, sizeof ph);
            close(pfd[0]);
            int status;
            waitpid(pid, &status, 0);
            if (got != (ssize_t)sizeof ph || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return 1;
            ph[P_TOTAL] = now_ms() - t0;
            for (int p = 0; r >= 0 && p < NPHASES; p++) res[mode][p][r] = ph[p];
            usleep(300000);
        }
    }
    printf("fuse_floor: %s, %d reps, median (fastest) ms\n", argv[1], reps);
    for (int m = 0; m < NMODES; m++) {
        printf("  %-7s", mode_name[m]);
        for (int p = 0; p < NPHASES; p++) {
            qsort(res[m][p], (size_t)reps, sizeof(double), cmp_double);
            printf("  %s %.1f (%.1f)", phase_name[p], res[m][p][reps / 2], res[m][p][0]);
        }
        printf("\n");
    }
    return 0;
}
