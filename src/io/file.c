/* Whole-file reads and atomic writes (temporary file + fsync + rename),
 * buffered or not. */
/* Linux's sync_file_range() is not in POSIX: _GNU_SOURCE exposes it next to
 * _POSIX_C_SOURCE. It is used only where it exists. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    if (!w->len || w->st != QF_OK) {
        w->len = 0;
        return;
    }
    bool whole = w->len == w->cap && w->off % QF_DIRECT_ALIGN == 0;
    if (!w->direct && whole && !w->buffered && w->off >= QF_DIRECT_FROM)
        w->buffered = !qf_file_writer_set_direct(w, true);
    if (w->direct && !whole) (void)qf_file_writer_set_direct(w, false);
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
