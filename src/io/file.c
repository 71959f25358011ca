/* Whole-file reads and atomic writes (temporary file + fsync + rename),
 * buffered or not. */
/* Linux's sync_file_range() is not in POSIX: _GNU_SOURCE exposes it next to
 * _POSIX_C_SOURCE. It is used only where it exists. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../core/mem.h"
#include "io_internal.h"

/* Buffers from this size on are populated before the read. */
#define QF_POPULATE_MIN ((size_t)1 << 20)

/* Read from fd until EOF into a buffer of at least `hint` bytes, growing it
 * when the file is longer (pipes, /proc files: st_size is only a hint).
 *
 * Files are read, not mapped: the ONNX importer keeps the buffer as the
 * storage of the model's weights, and a mapping would let another process
 * that truncates the file (an in-place `cp` over it) kill this one with
 * SIGBUS whenever a weight is read, for as long as the model is in use. */
static qf_status qf_fd_read_all(int fd, const char *path, size_t hint, size_t max, void **data,
                                size_t *size)
{
    /* One byte past the hint: reading a file of exactly `hint` bytes then
     * sees EOF with room to spare, instead of doubling the buffer just to
     * find out that nothing follows. */
    size_t cap = hint && hint < SIZE_MAX - 1 ? hint + 1 : 65536;
    unsigned char *buf = qf_malloc(cap + 1);
    if (!buf) return QF_ERR_NOMEM;
    if (cap >= QF_POPULATE_MIN) qf_mem_populate(buf, cap);
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            size_t ncap = cap * 2;
            unsigned char *nb = ncap > cap ? qf_realloc(buf, ncap + 1) : NULL;
            if (!nb) {
                qf_free(buf);
                return QF_ERR_NOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            qf_free(buf);
            return qf_error(QF_ERR_IO, "cannot read '%s': %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > max) { /* too big: say how big (at least), keep nothing */
            qf_free(buf);
            *data = NULL;
            *size = n;
            return QF_OK;
        }
    }
    buf[n] = 0; /* a terminator for text readers; not counted in size */
    *data = buf;
    *size = n;
    return QF_OK;
}

qf_status qf_file_open_regular(const char *path, int *fd, struct stat *st)
{
    /* O_NONBLOCK: opening a FIFO without a writer would block forever; the
     * flag is cleared again once the file is known to be a regular file. */
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0) return qf_error(QF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(*fd, st) != 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return qf_error(QF_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        const char *kind = S_ISDIR(st->st_mode)                           ? "a directory"
                           : S_ISFIFO(st->st_mode)                        ? "a FIFO"
                           : S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ? "a device"
                           : S_ISSOCK(st->st_mode)                        ? "a socket"
                                                                          : "not a regular file";
        close(*fd);
        *fd = -1;
        return qf_error(QF_ERR_IO, "cannot read '%s': it is %s, not a regular file", path, kind);
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl >= 0) (void)fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    return QF_OK;
}

qf_status qf_file_read_max(const char *path, size_t max, void **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    int fd;
    struct stat st;
    QF_TRY(qf_file_open_regular(path, &fd, &st));
    size_t hint = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size : 0;
    if (hint > max) {
        close(fd);
        *size = hint;
        return QF_OK;
    }
    qf_status s = qf_fd_read_all(fd, path, hint, max, data, size);
    close(fd);
    return s;
}

qf_status qf_file_read(const char *path, void **data, size_t *size)
{
    return qf_file_read_max(path, SIZE_MAX, data, size);
}

/* --- atomic writes ------------------------------------------------------------ */

static qf_status qf_write_all(int fd, const void *data, size_t size, const char *path)
{
    const unsigned char *p = data;
    while (size) {
        /* Chunks below 1 GiB: some kernels cap a single write() at ~2 GiB. */
        size_t chunk = size < ((size_t)1 << 30) ? size : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return qf_error(QF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        }
        p += w;
        size -= (size_t)w;
    }
    return QF_OK;
}

/* The directory part of path ("." when there is none), in buf. */
static void qf_dir_of(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(buf, size, ".");
    } else if (slash == path) {
        snprintf(buf, size, "/");
    } else {
        snprintf(buf, size, "%.*s", (int)(slash - path), path);
    }
}

/* --- temporary files ------------------------------------------------------------ */

/* The temporary files of writes in progress, for qf_file_remove_temps (a
 * signal handler): a slot is claimed (1), filled, then published (2); the
 * handler only reads published slots and calls unlink(), which is
 * async-signal-safe. A write that finds every slot taken still works; only
 * its cleanup on a signal is lost (the next write to that path removes it). */
#define QF_TEMP_SLOTS 32
#define QF_TEMP_PATH  4096
static struct {
    atomic_int state; /* 0 free, 1 being filled, 2 published */
    char path[QF_TEMP_PATH];
} qf_temps[QF_TEMP_SLOTS];

static void qf_temp_register(const char *tmp)
{
    size_t n = strlen(tmp);
    if (n >= QF_TEMP_PATH) return;
    for (int i = 0; i < QF_TEMP_SLOTS; i++) {
        int expect = 0;
        if (!atomic_compare_exchange_strong(&qf_temps[i].state, &expect, 1)) continue;
        memcpy(qf_temps[i].path, tmp, n + 1);
        atomic_store(&qf_temps[i].state, 2);
        return;
    }
}

void qf_file_temp_forget(const char *tmp)
{
    for (int i = 0; i < QF_TEMP_SLOTS; i++) {
        if (atomic_load(&qf_temps[i].state) != 2 || strcmp(qf_temps[i].path, tmp) != 0) continue;
        atomic_store(&qf_temps[i].state, 0);
        return;
    }
}

void qf_file_temp_discard(const char *tmp)
{
    /* Unlink first: a signal in between finds the name again, and unlinking
     * a name that is gone is harmless. */
    unlink(tmp);
    qf_file_temp_forget(tmp);
}

void qf_file_remove_temps(void)
{
    for (int i = 0; i < QF_TEMP_SLOTS; i++)
        if (atomic_load(&qf_temps[i].state) == 2) unlink(qf_temps[i].path);
}

#define QF_TEMP_TAG ".qfold-tmp-"

/* The pid in "<base>.qfold-tmp-<pid>-..." at name, or 0 when name is not
 * such a name. */
static long qf_temp_pid(const char *name, const char *base, size_t blen)
{
    if (strncmp(name, base, blen) != 0 ||
        strncmp(name + blen, QF_TEMP_TAG, sizeof QF_TEMP_TAG - 1) != 0)
        return 0;
    const char *p = name + blen + sizeof QF_TEMP_TAG - 1;
    long pid = 0;
    while (*p >= '0' && *p <= '9' && pid < 100000000L) pid = pid * 10 + (*p++ - '0');
    return *p == '-' ? pid : 0;
}

/* Remove the temporary files that writes to dir/base by processes no longer
 * alive left behind (a kill -9, a crash, a power cut): ".<base>.qfold-tmp-
 * <pid>-*", and the library's own temporary of such a staged file
 * ("..<base>.qfold-tmp-<pid>-*.qfold-tmp-*"). Files of live processes (a
 * concurrent write to the same path) are left alone. */
static void qf_temp_remove_stale(const char *dir, const char *base)
{
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    long self = (long)getpid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (n[0] != '.') continue;
        long pid = qf_temp_pid(n + 1, base, blen);
        if (!pid && n[1] == '.') pid = qf_temp_pid(n + 2, base, blen);
        if (pid <= 0 || pid == self) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        char full[QF_TEMP_PATH];
        int k = snprintf(full, sizeof full, "%s/%s", dir, n);
        struct stat st;
        if (k > 0 && (size_t)k < sizeof full && lstat(full, &st) == 0 && S_ISREG(st.st_mode))
            unlink(full);
    }
    closedir(d);
}

qf_status qf_file_temp_open(const char *path, char **tmp, int *fd)
{
    *tmp = NULL;
    *fd = -1;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = (size_t)(base - path);
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return qf_error(QF_ERR_IO, "cannot write '%s': not a file name", path);
    char dir[QF_TEMP_PATH];
    if (dlen >= sizeof dir) return qf_error(QF_ERR_IO, "cannot write '%s': path too long", path);
    qf_dir_of(path, dir, sizeof dir);
    qf_temp_remove_stale(dir, base);
    /* "dir/.base.qfold-tmp-<pid>-XXXXXX": hidden, named after its target and
     * its writer, and never mistaken for a finished output. */
    size_t size = strlen(path) + 64;
    char *t = qf_malloc(size);
    if (!t) return QF_ERR_NOMEM;
    snprintf(t, size, "%.*s.%s" QF_TEMP_TAG "%ld-XXXXXX", (int)dlen, path, base, (long)getpid());
    /* The name is published before the file exists: a termination signal
     * handled on any thread (oneDNN's OpenMP and the pool's threads take signals
     * too, so masking this thread's would not do) then finds the name and
     * its unlink is harmless if the file is not there yet. mkstemp cannot be
     * used for that (it names and creates in one step): the same six random
     * characters, O_CREAT | O_EXCL, a new name on a collision. */
    static const char set[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static atomic_uint counter;
    char *x = t + strlen(t) - 6;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
                 ((uint64_t)atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull);
    int err = EEXIST;
    for (int attempt = 0; attempt < 100 && *fd < 0 && err == EEXIST; attempt++) {
        for (int i = 0; i < 6; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = set[(r >> 33) % (sizeof set - 1)];
        }
        qf_temp_register(t);
        *fd = open(t, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        err = errno;
        if (*fd < 0) qf_file_temp_forget(t);
    }
    if (*fd < 0) {
        qf_status st = qf_error(QF_ERR_IO, "cannot create a temporary file next to '%s': %s", path,
                                strerror(err));
        qf_free(t);
        return st;
    }
    *tmp = t;
    return QF_OK;
}

qf_status qf_file_temp_create(const char *path, char **tmp)
{
    int fd;
    QF_TRY(qf_file_temp_open(path, tmp, &fd));
    close(fd);
    return QF_OK;
}

/* Alignment of O_DIRECT writes (memory, file offset, length): the logical
 * block size of the device, 4096 at most on the disks this runs on; a file
 * system that wants more refuses the write (EINVAL) and the writer goes
 * back to the page cache. */
#define QF_DIRECT_ALIGN ((size_t)4096)
/* Files written up to this size stay in the page cache (small outputs, read
 * back at once by tests and scripts); past it the writer bypasses it. */
#define QF_DIRECT_FROM ((size_t)4 << 20)

static qf_status qf_file_writer_buffer(qf_file_writer *w, size_t bufsize)
{
    bufsize = (bufsize + QF_DIRECT_ALIGN - 1) / QF_DIRECT_ALIGN * QF_DIRECT_ALIGN;
    w->raw = qf_malloc(bufsize + QF_DIRECT_ALIGN);
    if (!w->raw) return QF_ERR_NOMEM;
    uintptr_t a = ((uintptr_t)w->raw + QF_DIRECT_ALIGN - 1) / QF_DIRECT_ALIGN * QF_DIRECT_ALIGN;
    w->buf = w->raw + (a - (uintptr_t)w->raw);
    w->cap = bufsize;
    return QF_OK;
}

qf_status qf_file_writer_open(qf_file_writer *w, const char *path, size_t bufsize)
{
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->path = path;
    if (bufsize) QF_TRY(qf_file_writer_buffer(w, bufsize));
    /* The temporary file lives in the target's directory so that rename() is
     * atomic (same file system): readers see the old file or the whole new one. */
    qf_status st = qf_file_temp_open(path, &w->tmp, &w->fd);
    if (st != QF_OK) {
        qf_free(w->raw);
        memset(w, 0, sizeof *w);
        w->fd = -1;
        return st;
    }
    return QF_OK;
}

qf_status qf_file_writer_open_staged(qf_file_writer *w, const char *path, size_t bufsize)
{
    memset(w, 0, sizeof *w);
    w->path = path;
    w->staged = true;
    w->fd = -1;
    if (bufsize) QF_TRY(qf_file_writer_buffer(w, bufsize));
    /* O_NOFOLLOW: the caller created it as a regular file; a link put in its
     * place since is not followed. */
    w->fd = open(path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
    if (w->fd < 0) {
        qf_status st = qf_error(QF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        qf_free(w->raw);
        memset(w, 0, sizeof *w);
        w->fd = -1;
        return st;
    }
    return QF_OK;
}

/* Bytes written to the file between two writeback starts. */
#define QF_WRITEBACK_STEP ((size_t)8 << 20)

/* write() to the file, then, every QF_WRITEBACK_STEP bytes, ask the kernel to
 * start writing the new pages to disk without waiting for them: the final
 * fsync then finds most of the file on its way already, instead of starting
 * the whole transfer only once the last byte is in. */
static void qf_file_writer_raw(qf_file_writer *w, const void *data, size_t size)
{
    if (w->st != QF_OK) return;
    w->st = qf_write_all(w->fd, data, size, w->path);
    w->off += size;
#if defined(SYNC_FILE_RANGE_WRITE)
    if (w->st == QF_OK && !w->direct && w->off - w->synced >= QF_WRITEBACK_STEP) {
        (void)sync_file_range(w->fd, (off_t)w->synced, (off_t)(w->off - w->synced),
                              SYNC_FILE_RANGE_WRITE);
        w->synced = w->off;
    }
#endif
}

/* O_DIRECT on (or off) for the writes that follow; false if refused. */
static bool qf_file_writer_set_direct(qf_file_writer *w, bool on)
{
#if defined(O_DIRECT)
    int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || fcntl(w->fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) != 0) return false;
    w->direct = on;
    return true;
#else
    (void)w;
    (void)on;
    return false;
#endif
}

/* --- the writer thread ------------------------------------------------------------ */

/* Buffers in the ring: the caller fills one while the thread writes the
 * others that are full, all of them in one writev (a 3 MiB direct write
 * is one request to the device instead of three in a row). */
#define QF_PIPE_SLOTS 4
/* The ring starts on a 2 MiB boundary, so that all of it is in huge pages
 * (qf_mem_populate marks it; a huge page must be aligned to its size). On
 * the VMs this runs on, a direct write from 4 KB pages costs far more than
 * from huge pages, on every write and not only the first (the kernel takes
 * and maps the buffer's pages for each write): 100 MB written direct from
 * two 4 MiB buffers took 140-290 ms from 4 KB pages and 26-88 ms from
 * 2 MiB ones (bench/fuse_floor.c, bench/fuse.md). Aligned to 4096 only,
 * about half of the ring was in 4 KB pages. */
#define QF_RING_ALIGN ((size_t)2 << 20)

/* The direct writes of a big file, on a thread of their own. Written
 * synchronously, each 1 MiB direct write waited for the device before the
 * next buffer was filled, and on a quiet machine that cost more wall time
 * than the page cache it saves (bench/fuse.md, session 10). The caller
 * fills slot `(head + queued) % QF_PIPE_SLOTS`; slots [head, head + queued)
 * are full, in file order, and are the thread's until it has written them.
 * The thread owns the file descriptor while it runs (writev at the file
 * offset, O_DIRECT off if a write is refused); the caller touches it again
 * only after qf_pipe_finish has joined the thread. */
typedef struct qf_file_pipe {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *raw, *slot[QF_PIPE_SLOTS];
    size_t cap;
    int fd;
    const char *path;
    unsigned head, queued; /* under mu */
    bool quit;             /* under mu: write what is queued, then stop */
    bool discard;          /* under mu: stop without writing what is queued */
    bool buffered;         /* the thread's: O_DIRECT was refused */
    qf_status st;          /* under mu: the thread's first error, its message in msg */
    char msg[512];
} qf_file_pipe;

/* The rest of a write the device refused direct (EINVAL: an alignment the
 * file system does not take) or cut short (a full disk, the file size
 * limit), through the page cache from `skip` bytes into iov: it writes what
 * fits and reports the error, as a buffered writer would. */
static qf_status qf_pipe_write_rest(qf_file_pipe *p, const struct iovec *iov, int n, size_t skip)
{
#if defined(O_DIRECT)
    if (!p->buffered) {
        int fl = fcntl(p->fd, F_GETFL);
        if (fl >= 0) (void)fcntl(p->fd, F_SETFL, fl & ~O_DIRECT);
        p->buffered = true;
    }
#endif
    for (int i = 0; i < n; i++) {
        size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        qf_status st =
            qf_write_all(p->fd, (unsigned char *)iov[i].iov_base + skip, len - skip, p->path);
        if (st != QF_OK) return st;
        skip = 0;
    }
    return QF_OK;
}

/* Write n full slots from `first` (wrapping around the ring). */
static qf_status qf_pipe_write(qf_file_pipe *p, unsigned first, unsigned n)
{
    struct iovec iov[QF_PIPE_SLOTS];
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        iov[i].iov_base = p->slot[(first + i) % QF_PIPE_SLOTS];
        iov[i].iov_len = p->cap;
        total += p->cap;
    }
    if (p->buffered) return qf_pipe_write_rest(p, iov, (int)n, 0);
    ssize_t k;
    int e;
    do {
        k = writev(p->fd, iov, (int)n);
        e = k < 0 ? errno : 0;
    } while (k < 0 && e == EINTR);
    if (k == (ssize_t)total) return QF_OK;
    if (k < 0 && e != EINVAL)
        return qf_error(QF_ERR_IO, "cannot write '%s': %s", p->path, strerror(e));
    return qf_pipe_write_rest(p, iov, (int)n, k > 0 ? (size_t)k : 0);
}

static void *qf_pipe_main(void *arg)
{
    qf_file_pipe *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->queued && !p->quit && !p->discard) pthread_cond_wait(&p->cv, &p->mu);
        if (!p->queued || p->discard) break;
        unsigned first = p->head, n = p->queued;
        qf_status st = p->st;
        pthread_mutex_unlock(&p->mu);
        /* After an error the rest is dropped: the file is discarded. */
        if (st == QF_OK) st = qf_pipe_write(p, first, n);
        pthread_mutex_lock(&p->mu);
        if (st != QF_OK && p->st == QF_OK) {
            /* qf_error's message is this thread's: the caller gets a copy. */
            p->st = st;
            snprintf(p->msg, sizeof p->msg, "%s", qf_error_message());
        }
        p->head = (p->head + n) % QF_PIPE_SLOTS;
        p->queued -= n;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Start the writer thread with the writer's full buffer as the first slot
 * queued; false (the writer stays synchronous) if that cannot be done. */
static bool qf_pipe_start(qf_file_writer *w)
{
    qf_file_pipe *p = qf_calloc(1, sizeof *p);
    if (!p) return false;
    p->cap = w->cap;
    p->fd = w->fd;
    p->path = w->path;
    p->raw = qf_malloc(QF_PIPE_SLOTS * w->cap + QF_RING_ALIGN);
    if (!p->raw) {
        qf_free(p);
        return false;
    }
    uintptr_t a = ((uintptr_t)p->raw + QF_RING_ALIGN - 1) / QF_RING_ALIGN * QF_RING_ALIGN;
    unsigned char *ring = p->raw + (a - (uintptr_t)p->raw);
    /* Fresh memory, touched at once: one call, huge pages where the system
     * gives them, instead of 1,024 page faults (mem.h). */
    qf_mem_populate(ring, QF_PIPE_SLOTS * w->cap);
    for (int i = 0; i < QF_PIPE_SLOTS; i++) p->slot[i] = ring + (size_t)i * w->cap;
    memcpy(p->slot[0], w->buf, w->cap);
    p->queued = 1;
    bool ok = pthread_mutex_init(&p->mu, NULL) == 0;
    if (ok && pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        ok = false;
    }
    if (ok) {
        /* Signals go to the other threads: this one only writes. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        ok = pthread_create(&p->thread, NULL, qf_pipe_main, p) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (!ok) {
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
        }
    }
    if (!ok) {
        qf_free(p->raw);
        qf_free(p);
        return false;
    }
    qf_free(w->raw);
    w->raw = NULL;
    w->buf = p->slot[1];
    w->pipe = p;
    w->off += w->cap;
    w->len = 0;
    return true;
}

/* Take the thread's error, if it has one, as the writer's (under mu). */
static void qf_pipe_take_error(qf_file_writer *w)
{
    qf_file_pipe *p = w->pipe;
    if (p->st != QF_OK && w->st == QF_OK) w->st = qf_error(p->st, "%s", p->msg);
}

/* Queue the writer's full buffer and move it to a free slot, waiting for
 * the thread to free one when all are queued. */
static void qf_pipe_submit(qf_file_writer *w)
{
    qf_file_pipe *p = w->pipe;
    pthread_mutex_lock(&p->mu);
    p->queued++;
    pthread_cond_broadcast(&p->cv);
    while (p->queued == QF_PIPE_SLOTS && p->st == QF_OK) pthread_cond_wait(&p->cv, &p->mu);
    qf_pipe_take_error(w);
    w->buf = p->slot[(p->head + p->queued) % QF_PIPE_SLOTS];
    pthread_mutex_unlock(&p->mu);
    w->off += w->cap;
    w->len = 0;
}

/* Stop the thread: with `write`, once everything queued is written (its
 * error, if any, becomes the writer's); without, at once, dropping what is
 * queued (the file is being discarded). The ring becomes the writer's own
 * buffer memory, its current slot (the last, partial buffer) the buffer;
 * the descriptor is the caller's again, at the end of what the thread wrote. */
static void qf_pipe_finish(qf_file_writer *w, bool write)
{
    qf_file_pipe *p = w->pipe;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    if (write)
        p->quit = true;
    else
        p->discard = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    qf_pipe_take_error(w);
    w->direct = !p->buffered;
    w->buffered = w->buffered || p->buffered;
    w->raw = p->raw;
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    qf_free(p);
    w->pipe = NULL;
}

/* Write the buffer. A whole buffer (a multiple of QF_DIRECT_ALIGN at an
 * offset that is one) past the first QF_DIRECT_FROM bytes goes out with
 * O_DIRECT: straight from the buffer to the disk, no page-cache pages.
 * A big output is fsynced anyway, so its bytes go to the disk before commit
 * returns either way; through the page cache they would first be copied
 * into ~25,000 newly allocated pages per 100 MB, and on a VM that hands freed
 * memory back to its host a newly allocated page costs a fault in the host
 * (bench/fuse.md: writing resnet50's 100 MB took 430-710 ms through the page
 * cache, 110-145 ms direct). The last, partial buffer goes through the page
 * cache. A refused O_DIRECT (a file system without it, EINVAL on an
 * alignment it does not take) leaves the writer in the page cache. */
static void qf_file_writer_flush(qf_file_writer *w)
{
    if (w->pipe) {
        if (w->len == w->cap && w->st == QF_OK) {
            qf_pipe_submit(w);
            return;
        }
        /* The last, partial buffer: after everything before it. */
        qf_pipe_finish(w, w->st == QF_OK);
    }
    if (!w->len || w->st != QF_OK) {
        w->len = 0;
        return;
    }
    bool whole = w->len == w->cap && w->off % QF_DIRECT_ALIGN == 0;
    if (!w->direct && whole && !w->buffered && w->off >= QF_DIRECT_FROM)
        w->buffered = !qf_file_writer_set_direct(w, true);
    if (w->direct && !whole) (void)qf_file_writer_set_direct(w, false);
    /* From the first direct write on, the writer thread does them (the
     * synchronous path below remains if it cannot be started). */
    if (w->direct && qf_pipe_start(w)) return;
    if (w->direct) {
        ssize_t k;
        int e = 0;
        do {
            k = write(w->fd, w->buf, w->len);
            e = k < 0 ? errno : 0;
        } while (k < 0 && e == EINTR);
        if (k == (ssize_t)w->len) {
            w->off += w->len;
            w->len = 0;
            return;
        }
        if (k >= 0 || e != EINVAL) {
            /* A short write (a full disk, a file size limit): the rest
             * through the page cache reports the error, as without O_DIRECT. */
            size_t done = k > 0 ? (size_t)k : 0;
            w->off += done;
            memmove(w->buf, w->buf + done, w->len - done);
            w->len -= done;
            if (k < 0) {
                w->st = qf_error(QF_ERR_IO, "cannot write '%s': %s", w->path, strerror(e));
                w->len = 0;
                return;
            }
        }
        (void)qf_file_writer_set_direct(w, false);
        w->buffered = true;
    }
    qf_file_writer_raw(w, w->buf, w->len);
    w->len = 0;
}

void qf_file_writer_put(qf_file_writer *w, const void *data, size_t size)
{
    if (w->st != QF_OK || !size) return;
    w->written += size;
    if (!w->cap) {
        qf_file_writer_raw(w, data, size);
        return;
    }
    /* Everything through the buffer, written a whole buffer at a time (the
     * copy costs ~10 ms per 100 MB; the writes can then go out direct). */
    const unsigned char *p = data;
    while (size && w->st == QF_OK) {
        size_t k = w->cap - w->len < size ? w->cap - w->len : size;
        memcpy(w->buf + w->len, p, k);
        w->len += k;
        p += k;
        size -= k;
        if (w->len == w->cap) qf_file_writer_flush(w);
    }
}

void qf_file_writer_put_fill(qf_file_writer *w, size_t size, qf_file_fill fill, void *ctx)
{
    if (w->st != QF_OK || !size) return;
    if (!w->cap) {
        /* No buffer of its own: through a small one. */
        size_t bn = size < ((size_t)1 << 16) ? size : ((size_t)1 << 16);
        unsigned char *b = qf_malloc(bn);
        if (!b) {
            qf_file_writer_fail(w, QF_ERR_NOMEM);
            return;
        }
        for (size_t off = 0; off < size && w->st == QF_OK; off += bn) {
            size_t k = size - off < bn ? size - off : bn;
            qf_status st = fill(ctx, b, off, k);
            if (st != QF_OK) qf_file_writer_fail(w, st);
            else qf_file_writer_put(w, b, k);
        }
        qf_free(b);
        return;
    }
    /* Straight into the buffer: no copy of these bytes in between. */
    for (size_t off = 0; off < size && w->st == QF_OK;) {
        size_t k = w->cap - w->len < size - off ? w->cap - w->len : size - off;
        qf_status st = fill(ctx, w->buf + w->len, off, k);
        if (st != QF_OK) {
            qf_file_writer_fail(w, st);
            return;
        }
        w->len += k;
        w->written += k;
        off += k;
        if (w->len == w->cap) qf_file_writer_flush(w);
    }
}

void qf_file_writer_fail(qf_file_writer *w, qf_status st)
{
    if (w->st == QF_OK) w->st = st;
}

static void qf_file_writer_release(qf_file_writer *w)
{
    qf_free(w->tmp);
    qf_free(w->raw);
    w->tmp = NULL;
    w->buf = w->raw = NULL;
    w->fd = -1;
}

void qf_file_writer_abort(qf_file_writer *w)
{
    qf_pipe_finish(w, false);
    if (w->fd >= 0) {
        close(w->fd);
        if (!w->staged) qf_file_temp_discard(w->tmp);
    }
    qf_file_writer_release(w);
}

qf_status qf_file_writer_commit(qf_file_writer *w)
{
    if (w->fd < 0)
        return qf_error(QF_ERR_INTERNAL, "%s: commit of a file writer that is not open",
                        w->path ? w->path : "?");
    qf_file_writer_flush(w);
    /* A whole last buffer was only queued: wait for the thread to write it. */
    qf_pipe_finish(w, w->st == QF_OK);
    qf_status st = w->st;
    int fd = w->fd;
    const char *path = w->path, *tmp = w->tmp;
    if (w->staged) {
        /* The caller's temporary file: synced here, renamed by the caller. */
        if (st == QF_OK && fsync(fd) != 0)
            st = qf_error(QF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        if (close(fd) != 0 && st == QF_OK)
            st = qf_error(QF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        qf_file_writer_release(w);
        return st;
    }
    /* mkstemp creates the file 0600; give it the target's mode when it exists,
     * else the usual 0644 of a file written by a tool. */
    struct stat old;
    mode_t mode = stat(path, &old) == 0 ? (old.st_mode & 07777) : 0644;
    if (st == QF_OK && fchmod(fd, mode) != 0)
        st = qf_error(QF_ERR_IO, "cannot set the mode of '%s': %s", tmp, strerror(errno));
    if (st == QF_OK && fsync(fd) != 0)
        st = qf_error(QF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    if (close(fd) != 0 && st == QF_OK)
        st = qf_error(QF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    if (st == QF_OK && rename(tmp, path) != 0)
        st = qf_error(QF_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st != QF_OK) {
        qf_file_temp_discard(tmp);
    } else {
        qf_file_temp_forget(tmp);
        /* Make the rename itself durable; a failure here loses nothing. */
        char dir[4096];
        qf_dir_of(path, dir, sizeof dir);
        int dfd = open(dir, O_RDONLY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    qf_file_writer_release(w);
    return st;
}

qf_status qf_file_write_parts(const char *path, int nparts, const void *const *data,
                              const size_t *size)
{
    qf_file_writer w;
    QF_TRY(qf_file_writer_open(&w, path, 0));
    for (int i = 0; i < nparts; i++) qf_file_writer_put(&w, data[i], size[i]);
    return qf_file_writer_commit(&w);
}

qf_status qf_file_write_atomic(const char *path, const void *data, size_t size)
{
    const void *parts[1] = {data};
    size_t sizes[1] = {size};
    return qf_file_write_parts(path, 1, parts, sizes);
}
