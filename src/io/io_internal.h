/* Private helpers shared by the io module (files, .npy, ONNX). */
#ifndef QF_IO_INTERNAL_H
#define QF_IO_INTERNAL_H

#include "qfold/io.h"

/* Write the concatenation of `nparts` buffers to path atomically (temporary
 * file in the same directory, fsync, rename); a failure leaves no file. */
qf_status qf_file_write_parts(const char *path, int nparts, const void *const *data,
                              const size_t *size);

/* qf_file_read of a file of at most `max` bytes: a larger one is not read
 * (QF_OK with *data NULL and *size > max, its size or a lower bound). */
qf_status qf_file_read_max(const char *path, size_t max, void **data, size_t *size);

/* Open a file for reading without blocking (a FIFO with no writer) and
 * refuse anything but a regular file (directory, FIFO, device, socket:
 * QF_ERR_IO naming the kind). On success *fd is open and blocking. */
struct stat;
qf_status qf_file_open_regular(const char *path, int *fd, struct stat *st);

/* qf_file_temp_create, with the file left open in *fd. */
qf_status qf_file_temp_open(const char *path, char **tmp, int *fd);

/* A file written piece by piece to a temporary file next to `path`, renamed
 * into place by commit (same contract as qf_file_write_parts). With a buffer
 * (`bufsize`, rounded up to a multiple of 4096), every piece is gathered
 * into it and the file written in whole buffers, so that from QF_DIRECT_FROM
 * bytes on the writes can bypass the page cache (O_DIRECT, file.c); from
 * there on a writer thread does the writes, a few buffers at a time, while
 * the caller fills the next ones. Without a buffer, pieces go straight to
 * the file. The first error (the caller's or the writer thread's) sticks:
 * later puts do nothing, commit reports it and removes the temporary file. */
typedef struct qf_file_writer {
    const char *path;
    char *tmp;
    int fd;
    unsigned char *buf, *raw; /* buf: raw aligned for O_DIRECT */
    size_t len, cap;
    size_t written; /* bytes put so far */
    size_t off;     /* bytes written to the file so far */
    size_t synced;  /* bytes whose writeback was started */
    bool staged;    /* writing `path` itself (qf_file_writer_open_staged) */
    bool direct;    /* the file is open with O_DIRECT now */
    bool buffered;  /* O_DIRECT was refused: stay in the page cache */
    qf_status st;
    /* The writer thread and its ring of buffers, once the direct writes
     * have begun (file.c): it writes buffer k while the caller fills k + 1. */
    struct qf_file_pipe *pipe;
} qf_file_writer;
qf_status qf_file_writer_open(qf_file_writer *w, const char *path, size_t bufsize);
/* A writer of `path` itself, a temporary file the caller made
 * (qf_file_temp_create) and renames into place once everything it stages is
 * written: truncated and written, and commit only syncs and closes it (no
 * second temporary file, rename and directory sync). On any error the file
 * is left to the caller, who discards it. */
qf_status qf_file_writer_open_staged(qf_file_writer *w, const char *path, size_t bufsize);
void qf_file_writer_put(qf_file_writer *w, const void *data, size_t size);
/* Put `size` bytes that fill(ctx, dst, off, n) writes (bytes [off, off + n)
 * of them) straight into the writer's buffer, a piece at a time; an error
 * from fill sticks as the writer's. */
typedef qf_status (*qf_file_fill)(void *ctx, void *dst, size_t off, size_t n);
void qf_file_writer_put_fill(qf_file_writer *w, size_t size, qf_file_fill fill, void *ctx);
/* Record an error found by the caller (the first error sticks). */
void qf_file_writer_fail(qf_file_writer *w, qf_status st);
/* Flush, set the mode, fsync, close, rename; on any error the temporary file
 * is removed (staged: flush, fsync, close). Frees the writer either way. */
qf_status qf_file_writer_commit(qf_file_writer *w);
/* Close and remove the temporary file (staged: close it). */
void qf_file_writer_abort(qf_file_writer *w);

#endif
