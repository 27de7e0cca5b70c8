/* file.c — input files and atomic output. */
#define _GNU_SOURCE
#include "support.h"

#include <errno.h>
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

bool write_file_atomic(const char *path, const char *text, size_t len, char *err, size_t errlen) {
    if (!path || strcmp(path, "-") == 0) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            snprintf(err, errlen, "cannot write to standard output: %s", strerror(errno));
            return false;
        }
        return true;
    }
    char *tmp = malloc(strlen(path) + 16);
    sprintf(tmp, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        free(tmp);
        return false;
    }
    bool ok = true;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w <= 0) {
            ok = false;
            break;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0)
        ok = false;
    if (ok) {
        /* mkstemp makes the file 0600; give it the usual permissions. */
        mode_t mask = umask(0);
        umask(mask);
        chmod(tmp, 0666 & ~mask);
        ok = rename(tmp, path) == 0;
    }
    if (!ok) {
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return ok;
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
