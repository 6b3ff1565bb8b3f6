/*
 * A source address for every TCP connection of one process, for the fault harness's
 * workers whose client library cannot bind one (the Rust package on the `redis` crate,
 * the PHP package on phpredis): preloaded, it binds each IPv4 socket that connects to a
 * loopback address, and is not bound yet, to the address BINDSHIM_ADDRESS names (port 0:
 * the kernel picks one), then connects it. A partition of that address then cuts the
 * worker alone, as the Python and Node workers are cut by their own bound connections.
 * Without BINDSHIM_ADDRESS, or for any other socket, it only connects.
 *
 * Build: cc -O2 -shared -fPIC -o bindshim.so bindshim.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static int is_loopback(const struct sockaddr *addr, socklen_t len)
{
    if (addr == NULL || len < (socklen_t)sizeof(struct sockaddr_in) || addr->sa_family != AF_INET) {
        return 0;
    }
    const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
}

/* Binds fd to BINDSHIM_ADDRESS:0 if it is not bound yet; any failure leaves it as it is
 * (the connect then goes out from the default address, which the harness would see as
 * a worker a partition does not cut: the checker's counts would show it). */
static void bind_source(int fd)
{
    const char *address = getenv("BINDSHIM_ADDRESS");
    if (address == NULL || *address == '\0') {
        return;
    }
    struct sockaddr_in bound;
    socklen_t bound_len = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &bound_len) != 0 || bound.sin_family != AF_INET
        || bound.sin_port != 0) {
        return;
    }
    struct sockaddr_in source;
    memset(&source, 0, sizeof(source));
    source.sin_family = AF_INET;
    source.sin_port = 0;
    if (inet_pton(AF_INET, address, &source.sin_addr) != 1) {
        return;
    }
    (void)bind(fd, (struct sockaddr *)&source, sizeof(source));
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    static connect_fn real_connect;
    if (real_connect == NULL) {
        real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    }
    if (is_loopback(addr, len)) {
        bind_source(fd);
    }
    return real_connect(fd, addr, len);
}
