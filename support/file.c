/* file.c — input files and output files (atomic where that is safe). */
#define _GNU_SOURCE
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *read_file(Arena *a, const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f) ? errno : 0;
    if (f != stdin)
        fclose(f);
    if (err) {
        free(buf);
        errno = err ? err : EIO;
        return NULL;
    }
    char *out = arena_strndup(a, buf, n);
    free(buf);
    *len = n;
    return out;
}

/* Writes all of text to fd; false with errno set on failure. */
static bool write_all(int fd, const char *text, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, text, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return false;
        }
        text += w;
        len -= (size_t)w;
    }
    return true;
}

/* Opens path as it is (following symlinks, creating it if missing) and
 * writes through: for devices, FIFOs, hard-linked files and dangling links. */
static bool write_through(const char *path, const char *text, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return false;
    bool ok = write_all(fd, text, len);
    int saved = errno;
    if (close(fd) != 0 && ok)
        return false;
    errno = saved;
    return ok;
}

/* A temp file beside the real target, then rename(2) over it. The target's
 * mode (and, for root, owner) carry over; a new file gets 0666 & ~umask. */
static bool write_replacing(const char *target, const struct stat *old, const char *text, size_t len) {
    char *tmp = malloc(strlen(target) + 16);
    sprintf(tmp, "%s.tmp.XXXXXX", target);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(tmp);
        return false;
    }
    mode_t mode;
    if (old) {
        mode = old->st_mode & 07777;
        if (geteuid() == 0 && fchown(fd, old->st_uid, old->st_gid) != 0) {
            /* best effort: the content matters more than the owner */
        }
    } else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    bool ok = fchmod(fd, mode) == 0 && write_all(fd, text, len);
    int saved = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(tmp, target) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok)
        unlink(tmp);
    free(tmp);
    errno = saved;
    return ok;
}

bool write_output_file(const char *path, const char *text, size_t len, char *err, size_t errlen) {
    if (!path || strcmp(path, "-") == 0) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            snprintf(err, errlen, "cannot write to standard output: %s", strerror(errno));
            return false;
        }
        return true;
    }
    struct stat st;
    bool ok;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            errno = EISDIR;
            ok = false;
        } else if (!S_ISREG(st.st_mode) || st.st_nlink > 1) {
            ok = write_through(path, text, len);
        } else {
            char *target = realpath(path, NULL);   /* a symlink's file, not the link */
            ok = target && write_replacing(target, &st, text, len);
            int saved = errno;
            free(target);
            errno = saved;
        }
    } else if (errno == ENOENT) {
        struct stat lst;
        ok = lstat(path, &lst) == 0 ? write_through(path, text, len)   /* a dangling link */
                                    : write_replacing(path, NULL, text, len);
    } else {
        ok = false;
    }
    if (!ok)
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
    return ok;
}

bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || strcmp(a, "-") == 0 || strcmp(b, "-") == 0)
        return false;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void strbuf_open(StrBuf *b) {
    b->data = NULL;
    b->len = 0;
    b->f = open_memstream(&b->data, &b->len);
    if (!b->f)
        die("open_memstream failed");
}

char *strbuf_finish(StrBuf *b, Arena *a, size_t *len) {
    fclose(b->f);
    char *out = arena_strndup(a, b->data, b->len);
    if (len)
        *len = b->len;
    free(b->data);
    return out;
}
