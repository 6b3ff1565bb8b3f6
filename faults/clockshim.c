/*
 * A wall-clock offset for one server process, for the fault harness's clock nemesis on
 * servers libfaketime cannot be preloaded into: Debian's redis-server links the shared
 * jemalloc, whose start-up calls clock_gettime from inside libfaketime's own start-up
 * (libfaketime issue #130), and the server never starts. This shim needs no dlsym and no malloc:
 * it reads the clock with the raw system call and adds the offset the file named by
 * CLOCKSHIM_FILE holds, in libfaketime's notation for whole seconds ("+5s", "-3s", "+0"),
 * re-read on every call from a shared mapping, so the harness jumps the clock by
 * rewriting the file in place. Only the wall clock moves: CLOCK_MONOTONIC is left alone,
 * as libfaketime does with FAKETIME_DONT_FAKE_MONOTONIC=1.
 *
 * Build: cc -O2 -shared -fPIC -o clockshim.so clockshim.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OFFSET_BYTES 32

static const volatile char *offset_text;
static int opened;

static long long offset_ns(void)
{
    if (!opened) {
        opened = 1;
        const char *path = getenv("CLOCKSHIM_FILE");
        int fd = path ? open(path, O_RDONLY) : -1;
        if (fd >= 0) {
            void *map = mmap(NULL, OFFSET_BYTES, PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
            if (map != MAP_FAILED) {
                offset_text = map;
            }
        }
    }
    if (!offset_text) {
        return 0;
    }
    /* "[+-]<digits>[s]": seconds. */
    long long sign = 1, seconds = 0;
    int at = 0;
    if (offset_text[at] == '+' || offset_text[at] == '-') {
        sign = offset_text[at] == '-' ? -1 : 1;
        at++;
    }
    while (at < OFFSET_BYTES && offset_text[at] >= '0' && offset_text[at] <= '9') {
        seconds = seconds * 10 + (offset_text[at] - '0');
        at++;
    }
    return sign * seconds * 1000000000LL;
}

static void shift(struct timespec *ts, long long by_ns)
{
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + by_ns;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t clock, struct timespec *ts)
{
    int rc = (int)syscall(SYS_clock_gettime, clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        shift(ts, offset_ns());
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz)
{
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
