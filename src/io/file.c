/* Whole-file reads and atomic writes (temporary file + fsync + rename). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_internal.h"

qf_status qf_file_read(const char *path, void **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return qf_error(QF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return qf_error(QF_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return qf_error(QF_ERR_IO, "cannot read '%s': it is a directory", path);
    }
    /* st_size is only a hint for regular files; read until EOF whatever it says,
     * growing the buffer when the file is longer (pipes, /proc files). */
    size_t cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size : 65536;
    unsigned char *buf = qf_malloc(cap + 1);
    if (!buf) {
        close(fd);
        return QF_ERR_NOMEM;
    }
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            size_t ncap = cap * 2;
            unsigned char *nb = ncap > cap ? qf_realloc(buf, ncap + 1) : NULL;
            if (!nb) {
                qf_free(buf);
                close(fd);
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
            close(fd);
            return qf_error(QF_ERR_IO, "cannot read '%s': %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0; /* a terminator for text readers; not counted in size */
    *data = buf;
    *size = n;
    return QF_OK;
}

static qf_status qf_write_all(int fd, const void *data, size_t size, const char *tmp)
{
    const unsigned char *p = data;
    while (size) {
        /* Chunks below 1 GiB: some kernels cap a single write() at ~2 GiB. */
        size_t chunk = size < ((size_t)1 << 30) ? size : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return qf_error(QF_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
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

qf_status qf_file_write_parts(const char *path, int nparts, const void *const *data,
                              const size_t *size)
{
    size_t plen = strlen(path);
    char *tmp = qf_malloc(plen + 16);
    if (!tmp) return QF_ERR_NOMEM;
    /* The temporary file lives in the target's directory so that rename() is
     * atomic (same file system): readers see the old file or the whole new one. */
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        qf_status st = qf_error(QF_ERR_IO, "cannot create a temporary file next to '%s': %s", path,
                                strerror(errno));
        qf_free(tmp);
        return st;
    }
    qf_status st = QF_OK;
    for (int i = 0; i < nparts && st == QF_OK; i++) st = qf_write_all(fd, data[i], size[i], tmp);
    /* mkstemp creates the file 0600; give it the target's mode when it exists,
     * else the usual 0644 of a file written by a tool. */
    struct stat old;
    mode_t mode = stat(path, &old) == 0 ? (old.st_mode & 07777) : 0644;
    if (st == QF_OK && fchmod(fd, mode) != 0)
        st = qf_error(QF_ERR_IO, "cannot set the mode of '%s': %s", tmp, strerror(errno));
    if (st == QF_OK && fsync(fd) != 0)
        st = qf_error(QF_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == QF_OK)
        st = qf_error(QF_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    if (st == QF_OK && rename(tmp, path) != 0)
        st = qf_error(QF_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st != QF_OK) {
        unlink(tmp);
    } else {
        /* Make the rename itself durable; a failure here loses nothing. */
        char dir[4096];
        qf_dir_of(path, dir, sizeof dir);
        int dfd = open(dir, O_RDONLY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    qf_free(tmp);
    return st;
}

qf_status qf_file_write_atomic(const char *path, const void *data, size_t size)
{
    const void *parts[1] = {data};
    size_t sizes[1] = {size};
    return qf_file_write_parts(path, 1, parts, sizes);
}
