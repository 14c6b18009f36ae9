/*
 * An LD_PRELOAD shim that makes reads or writes of files under a directory
 * fail with EIO, as a dying disk's would: the functional test `io_errors`
 * compiles it with `cc` and loads it into `osprey serve`.
 *
 * EIO_SHIM_DIR      files whose path starts with it are affected
 * EIO_SHIM_TRIGGER  errors happen only while this file exists
 * EIO_SHIM_OPS      "r", "w" or "rw": reads (read, pread, readv) and/or
 *                     writes (write, pwrite, writev, fsync, fdatasync)
 * EIO_SHIM_ONE_IN   one affected call in this many fails (default 1)
 * EIO_SHIM_SEED     where the count starts
 *
 * Device-mapper's error target would be the other way, but this VM's
 * kernel has no device-mapper driver (/dev/mapper/control: No such device).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static atomic_ulong calls;

/* Whether this call on `fd`, a read ('r') or a write ('w'), fails. */
static int fails(int fd, char op) {
    const char *dir = getenv("EIO_SHIM_DIR");
    const char *trigger = getenv("EIO_SHIM_TRIGGER");
    const char *ops = getenv("EIO_SHIM_OPS");
    if (!dir || !trigger || !ops || !strchr(ops, op)) {
        return 0;
    }
    if (access(trigger, F_OK) != 0) {
        return 0;
    }
    char link[64];
    char path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, sizeof path - 1);
    if (len <= 0) {
        return 0;
    }
    path[len] = '\0';
    if (strncmp(path, dir, strlen(dir)) != 0) {
        return 0;
    }
    const char *one_in = getenv("EIO_SHIM_ONE_IN");
    const char *seed = getenv("EIO_SHIM_SEED");
    unsigned long n = one_in ? strtoul(one_in, NULL, 10) : 1;
    unsigned long start = seed ? strtoul(seed, NULL, 10) : 0;
    unsigned long call = atomic_fetch_add(&calls, 1) + start;
    return n <= 1 || call % n == 0;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))
#define FAIL_IF(fd, op)       \
    if (fails((fd), (op))) {  \
        errno = EIO;          \
        return -1;            \
    }

ssize_t read(int fd, void *buf, size_t count) {
    FAIL_IF(fd, 'r');
    return REAL(read)(fd, buf, count);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    FAIL_IF(fd, 'r');
    return REAL(pread)(fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off64_t offset) {
    FAIL_IF(fd, 'r');
    return REAL(pread64)(fd, buf, count, offset);
}

ssize_t readv(int fd, const struct iovec *iov, int iovcnt) {
    FAIL_IF(fd, 'r');
    return REAL(readv)(fd, iov, iovcnt);
}

ssize_t write(int fd, const void *buf, size_t count) {
    FAIL_IF(fd, 'w');
    return REAL(write)(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    FAIL_IF(fd, 'w');
    return REAL(pwrite)(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    FAIL_IF(fd, 'w');
    return REAL(pwrite64)(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    FAIL_IF(fd, 'w');
    return REAL(writev)(fd, iov, iovcnt);
}

int fsync(int fd) {
    FAIL_IF(fd, 'w');
    return REAL(fsync)(fd);
}

int fdatasync(int fd) {
    FAIL_IF(fd, 'w');
    return REAL(fdatasync)(fd);
}
