/* Ring links: frame headers, and forming the ring (listen on our endpoint,
 * connect to the next rank with backoff, accept the previous one, check both
 * handshakes). AUTO picks a Unix socket in the abstract namespace
 * ("@ps-ring:<endpoint>") when the next rank is on this host, TCP otherwise. */
#include "link.h"

#include "log.h"
#include "ps_error.h"
#include "tfconfig.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- frames ---- */

static void put32(unsigned char *p, uint32_t v) {
    v = htole32(v);
    memcpy(p, &v, 4);
}
static uint32_t get32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

void ps__frame_encode(const ps__frame *f, unsigned char out[PS_RING_HDR]) {
    put32(out, PS_RING_MAGIC);
    out[4] = f->type;
    out[5] = f->op;
    uint16_t step = htole16(f->step);
    memcpy(out + 6, &step, 2);
    put32(out + 8, f->seq);
    put32(out + 12, f->chunk);
    put32(out + 16, f->len);
    put32(out + 20, 0);
    uint64_t total = htole64(f->total);
    memcpy(out + 24, &total, 8);
}

int ps__frame_decode(const unsigned char in[PS_RING_HDR], ps__frame *f, char *err, size_t errlen) {
    uint32_t magic = get32(in);
    if (magic != PS_RING_MAGIC) {
        snprintf(err, errlen, "bad frame magic 0x%08x (garbage on the ring)", (unsigned)magic);
        return PS_EPROTO;
    }
    f->type = in[4];
    f->op = in[5];
    uint16_t step;
    memcpy(&step, in + 6, 2);
    f->step = le16toh(step);
    f->seq = get32(in + 8);
    f->chunk = get32(in + 12);
    f->len = get32(in + 16);
    uint64_t total;
    memcpy(&total, in + 24, 8);
    f->total = le64toh(total);
    if (f->type < PS_FRAME_DATA || f->type > PS_FRAME_BYE) {
        snprintf(err, errlen, "unknown frame type %u", (unsigned)f->type);
        return PS_EPROTO;
    }
    if (get32(in + 20) != 0) {
        snprintf(err, errlen, "frame with reserved bits set");
        return PS_EPROTO;
    }
    return PS_OK;
}

const char *ps__op_name(int op) {
    switch (op) {
    case PS_OP_ALLREDUCE:
        return "all-reduce";
    case PS_OP_BROADCAST:
        return "broadcast";
    case PS_OP_ALLGATHER:
        return "allgather";
    case PS_OP_ALLREDUCE_F16:
        return "all-reduce (fp16)";
    case PS_OP_ALLREDUCE_BF16:
        return "all-reduce (bf16)";
    case PS_OP_ALLGATHERV:
        return "allgatherv";
    default:
        return "no operation";
    }
}

size_t ps__hello_build(unsigned char *buf, size_t buflen, int type, unsigned size, unsigned from,
                       unsigned to, const char *job_id) {
    size_t jl = strlen(job_id);
    size_t len = 16 + jl;
    if (len > PS_RING_CTRL_MAX || PS_RING_HDR + len > buflen) return 0;
    ps__frame f = {.type = (uint8_t)type, .len = (uint32_t)len};
    ps__frame_encode(&f, buf);
    unsigned char *p = buf + PS_RING_HDR;
    put32(p, PS_RING_VERSION);
    put32(p + 4, size);
    put32(p + 8, from);
    put32(p + 12, to);
    memcpy(p + 16, job_id, jl);
    return PS_RING_HDR + len;
}

/* ---- sockets ---- */

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen, const char *fmt,
                                                          ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ps__link_tune(int fd, int is_tcp) {
    int one = 1;
    if (is_tcp) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* Unix stream sockets: the sender's buffer bounds what is in flight (capped
     * by net.core.wmem_max); TCP autotunes its buffers unless they are set. */
    if (!is_tcp) {
        int big = 4 << 20;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    }
}

/* The abstract-namespace address of an endpoint's Unix socket. */
static int unix_addr(const char *endpoint, struct sockaddr_un *sa, socklen_t *len) {
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "ps-ring:%s", endpoint);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path - 1) return PS_EINVAL;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return PS_OK;
}

/* Resolves host:port to one TCP address (IPv4 preferred by getaddrinfo's order). */
static int tcp_addr(const char *endpoint, struct sockaddr_storage *ss, socklen_t *len, char *err,
                    size_t errlen) {
    char host[256];
    int port = 0;
    if (ps_parse_hostport(endpoint, host, sizeof host, &port) != PS_OK) {
        set_err(err, errlen, "endpoint \"%s\" is not host:port", endpoint);
        return PS_EINVAL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0 || !res) {
        set_err(err, errlen, "cannot resolve %s: %s", endpoint, gai_strerror(g));
        return PS_EINVAL;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return PS_OK;
}

static int same_ip(const struct sockaddr *a, const struct sockaddr *b) {
    if (a->sa_family != b->sa_family) return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return 0;
}

/* 1 when endpoint's host is this host: the same host string as our own
 * endpoint, a loopback address, or an address of one of our interfaces. */
static int is_local(const char *endpoint, const char *own) {
    char h1[256], h2[256];
    if (ps_parse_hostport(endpoint, h1, sizeof h1, NULL) != PS_OK) return 0;
    if (ps_parse_hostport(own, h2, sizeof h2, NULL) == PS_OK && strcmp(h1, h2) == 0) return 1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(h1, NULL, &hints, &res) != 0) return 0;
    int local = 0;
    struct ifaddrs *ifs = NULL;
    int have_ifs = getifaddrs(&ifs) == 0;
    for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
        if (a->ai_family == AF_INET &&
            (ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr) >> 24) == 127)
            local = 1;
        if (a->ai_family == AF_INET6 &&
            IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr))
            local = 1;
        for (struct ifaddrs *i = have_ifs ? ifs : NULL; i && !local; i = i->ifa_next)
            if (i->ifa_addr && same_ip(i->ifa_addr, a->ai_addr)) local = 1;
    }
    if (have_ifs) freeifaddrs(ifs);
    freeaddrinfo(res);
    return local;
}

static void addr_text(const struct sockaddr_storage *ss, char *out, size_t n) {
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip);
        snprintf(out, n, "%s:%u", ip, (unsigned)ntohs(s->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip);
        snprintf(out, n, "[%s]:%u", ip, (unsigned)ntohs(s->sin6_port));
    } else {
        snprintf(out, n, "a local process");
    }
}

/* ---- forming the ring ---- */

/* A nonblocking reader of one small frame (handshake or abort). */
typedef struct {
    unsigned char buf[PS_RING_HDR + PS_RING_CTRL_MAX];
    size_t have;
    ps__frame f;
} small_rx;

/* Returns 1 when a whole frame is in, 0 when more is needed, or an error
 * (PS_EIO: closed or failed, the reason in err; PS_EPROTO: not a frame). */
static int small_read(int fd, small_rx *rx, char *err, size_t errlen) {
    for (;;) {
        size_t need = PS_RING_HDR;
        if (rx->have >= PS_RING_HDR) need += rx->f.len;
        if (rx->have == need) return 1;
        ssize_t k = recv(fd, rx->buf + rx->have, need - rx->have, 0);
        if (k == 0) {
            set_err(err, errlen, "closed the connection during the handshake");
            return PS_EIO;
        }
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            set_err(err, errlen, "handshake failed: %s", strerror(errno));
            return PS_EIO;
        }
        rx->have += (size_t)k;
        if (rx->have == PS_RING_HDR) {
            char why[160];
            if (ps__frame_decode(rx->buf, &rx->f, why, sizeof why) != PS_OK) {
                set_err(err, errlen, "sent garbage instead of a handshake: %s", why);
                return PS_EPROTO;
            }
            if (rx->f.len > PS_RING_CTRL_MAX) {
                set_err(err, errlen, "sent a %u-byte frame instead of a handshake", rx->f.len);
                return PS_EPROTO;
            }
        }
    }
}

/* Writes a small frame whole (waiting for room up to deadline). */
static int small_write(int fd, const unsigned char *p, size_t n, long long deadline) {
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            long long left = deadline - now_ms();
            if (left <= 0) return PS_ETIMEDOUT;
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, (int)left);
            continue;
        }
        return PS_EIO;
    }
    return PS_OK;
}

/* Sends an ABORT frame carrying code and reason (best effort). */
static void send_reject(int fd, int code, const char *reason) {
    unsigned char buf[PS_RING_HDR + PS_RING_CTRL_MAX];
    size_t tl = strlen(reason);
    if (tl > PS_RING_CTRL_MAX - 4) tl = PS_RING_CTRL_MAX - 4;
    ps__frame f = {.type = PS_FRAME_ABORT, .len = (uint32_t)(4 + tl)};
    ps__frame_encode(&f, buf);
    put32(buf + PS_RING_HDR, (uint32_t)code);
    memcpy(buf + PS_RING_HDR + 4, reason, tl);
    small_write(fd, buf, PS_RING_HDR + 4 + tl, now_ms() + 500);
}

/* Checks a HELLO (or HELLO_ACK) from `who`; returns PS_OK or PS_EPROTO with
 * the reason in err. */
static int check_hello(const small_rx *rx, int type, const ps_ring_config *cfg, unsigned from,
                       const char *who, char *err, size_t errlen) {
    const unsigned char *p = rx->buf + PS_RING_HDR;
    if (rx->f.type == PS_FRAME_ABORT && rx->f.len >= 4) {
        set_err(err, errlen, "%s refused the handshake: %.*s", who, (int)(rx->f.len - 4), p + 4);
        return PS_EPROTO;
    }
    if (rx->f.type != type || rx->f.len < 16) {
        set_err(err, errlen, "%s sent a frame of type %u (%u bytes) instead of a handshake", who,
                (unsigned)rx->f.type, rx->f.len);
        return PS_EPROTO;
    }
    unsigned ver = get32(p), size = get32(p + 4), src = get32(p + 8), dst = get32(p + 12);
    size_t jl = rx->f.len - 16;
    const char *job = (const char *)p + 16;
    if (ver != PS_RING_VERSION) {
        set_err(err, errlen, "%s speaks ring protocol version %u, this rank %u", who, ver,
                PS_RING_VERSION);
        return PS_EPROTO;
    }
    if (jl != strlen(cfg->job_id) || memcmp(job, cfg->job_id, jl) != 0) {
        char shown[80];
        size_t k = 0;
        for (; k < jl && k + 1 < sizeof shown; k++)
            shown[k] = (job[k] >= 0x20 && job[k] < 0x7f) ? job[k] : '?';
        shown[k] = '\0';
        set_err(err, errlen, "%s belongs to job \"%s\", not this ring's job \"%s\"", who, shown,
                cfg->job_id);
        return PS_EPROTO;
    }
    if (size != cfg->size || src != from || dst != cfg->rank) {
        set_err(err, errlen,
                "%s says it is rank %u of %u talking to rank %u; expected rank %u of %u talking to "
                "rank %u",
                who, src, size, dst, from, cfg->size, cfg->rank);
        return PS_EPROTO;
    }
    return PS_OK;
}

typedef struct {
    const ps_ring_config *cfg;
    unsigned next, prev;
    int next_unix; /* our link to next is a Unix socket */
    int lfd[2];    /* listening: TCP, Unix (-1 when unused) */
    /* outgoing: to next */
    int ofd;
    int ostate; /* 0 wait retry, 1 connecting, 2 hello sent, 3 done */
    long long retry_at;
    int backoff_ms;
    char olast[200]; /* last connect error */
    small_rx orx;
    /* incoming: from prev */
    int ifd;
    int istate; /* 0 none, 1 reading hello, 2 done */
    char ipeer[80];
    small_rx irx;
} former;

static int listen_on(former *fm, char *err, size_t errlen) {
    const ps_ring_config *cfg = fm->cfg;
    const char *ep = cfg->endpoints[cfg->rank];
    if (cfg->transport != PS_RING_UNIX) {
        struct sockaddr_storage ss;
        socklen_t len;
        int rc = tcp_addr(ep, &ss, &len, err, errlen);
        if (rc != PS_OK) return rc;
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            set_err(err, errlen, "socket: %s", strerror(errno));
            return PS_EIO;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int b = bind(fd, (struct sockaddr *)&ss, len);
        if (b < 0 && errno == EADDRNOTAVAIL) {
            /* the endpoint names this host by an address it does not have (NAT): any */
            if (ss.ss_family == AF_INET)
                ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
            else
                ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
            b = bind(fd, (struct sockaddr *)&ss, len);
        }
        if (b < 0 || listen(fd, 8) < 0) {
            int e = errno;
            close(fd);
            set_err(err, errlen, "cannot listen on %s: %s", ep, strerror(e));
            return e == EADDRINUSE ? PS_EADDRINUSE : PS_EIO;
        }
        fm->lfd[0] = fd;
    }
    if (cfg->transport != PS_RING_TCP) {
        struct sockaddr_un sa;
        socklen_t len;
        if (unix_addr(ep, &sa, &len) != PS_OK) {
            set_err(err, errlen, "endpoint \"%s\" is too long for a Unix socket name", ep);
            return PS_EINVAL;
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 8) < 0) {
            int e = errno;
            if (fd >= 0) close(fd);
            set_err(err, errlen, "cannot listen on @ps-ring:%s: %s", ep, strerror(e));
            return e == EADDRINUSE ? PS_EADDRINUSE : PS_EIO;
        }
        fm->lfd[1] = fd;
    }
    if (cfg->transport == PS_RING_AUTO)
        PS_INFO("ring rank %u/%u: listening on %s (tcp) and @ps-ring:%s (unix)", cfg->rank,
                cfg->size, ep, ep);
    else
        PS_INFO("ring rank %u/%u: listening on %s%s", cfg->rank, cfg->size,
                cfg->transport == PS_RING_UNIX ? "@ps-ring:" : "", ep);
    return PS_OK;
}

/* Starts a nonblocking connect to next; returns PS_OK (ostate 1) or sets a retry. */
static int start_connect(former *fm, char *err, size_t errlen) {
    const char *ep = fm->cfg->endpoints[fm->next];
    struct sockaddr_storage ss;
    socklen_t len;
    if (fm->next_unix) {
        if (unix_addr(ep, (struct sockaddr_un *)&ss, &len) != PS_OK) {
            set_err(err, errlen, "endpoint \"%s\" is too long for a Unix socket name", ep);
            return PS_EINVAL;
        }
    } else {
        int rc = tcp_addr(ep, &ss, &len, err, errlen);
        if (rc != PS_OK) return rc;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        set_err(err, errlen, "socket: %s", strerror(errno));
        return PS_EIO;
    }
    if (connect(fd, (struct sockaddr *)&ss, len) == 0 || errno == EINPROGRESS) {
        fm->ofd = fd;
        fm->ostate = 1;
        return PS_OK;
    }
    snprintf(fm->olast, sizeof fm->olast, "%s", strerror(errno));
    close(fd);
    fm->ostate = 0;
    fm->retry_at = now_ms() + fm->backoff_ms;
    fm->backoff_ms = fm->backoff_ms * 2 > 500 ? 500 : fm->backoff_ms * 2;
    return PS_OK;
}

static void retry_later(former *fm, const char *why) {
    snprintf(fm->olast, sizeof fm->olast, "%s", why);
    close(fm->ofd);
    fm->ofd = -1;
    fm->ostate = 0;
    fm->retry_at = now_ms() + fm->backoff_ms;
    fm->backoff_ms = fm->backoff_ms * 2 > 500 ? 500 : fm->backoff_ms * 2;
}

static void former_close(former *fm) {
    for (int i = 0; i < 2; i++)
        if (fm->lfd[i] >= 0) close(fm->lfd[i]);
    if (fm->ofd >= 0) close(fm->ofd);
    if (fm->ifd >= 0) close(fm->ifd);
    fm->lfd[0] = fm->lfd[1] = fm->ofd = fm->ifd = -1;
}

/* One step of the outgoing side after poll said fd is ready. */
static int out_step(former *fm, char *err, size_t errlen) {
    const ps_ring_config *cfg = fm->cfg;
    char who[PS_RING_NAME_MAX];
    snprintf(who, sizeof who, "rank %u (%s)", fm->next, cfg->endpoints[fm->next]);
    if (fm->ostate == 1) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fm->ofd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr != 0) {
            retry_later(fm, strerror(soerr));
            return PS_OK;
        }
        unsigned char buf[PS_RING_HDR + PS_RING_CTRL_MAX];
        size_t n = ps__hello_build(buf, sizeof buf, PS_FRAME_HELLO, cfg->size, cfg->rank, fm->next,
                                   cfg->job_id);
        if (small_write(fm->ofd, buf, n, now_ms() + 2000) != PS_OK) {
            retry_later(fm, "the handshake could not be sent");
            return PS_OK;
        }
        fm->ostate = 2;
        memset(&fm->orx, 0, sizeof fm->orx);
        return PS_OK;
    }
    char why[400];
    int rc = small_read(fm->ofd, &fm->orx, why, sizeof why);
    if (rc == 0) return PS_OK;
    if (rc < 0) {
        set_err(err, errlen, "%s %s", who, why);
        return rc;
    }
    rc = check_hello(&fm->orx, PS_FRAME_HELLO_ACK, cfg, fm->next, who, err, errlen);
    if (rc != PS_OK) return rc;
    fm->ostate = 3;
    PS_INFO("ring rank %u/%u: connected to rank %u (next) at %s over %s", cfg->rank, cfg->size,
            fm->next, cfg->endpoints[fm->next], fm->next_unix ? "unix" : "tcp");
    return PS_OK;
}

static int in_step(former *fm, char *err, size_t errlen) {
    const ps_ring_config *cfg = fm->cfg;
    char who[PS_RING_NAME_MAX];
    snprintf(who, sizeof who, "the peer at %s (claiming to be rank %u)", fm->ipeer, fm->prev);
    char why[400];
    int rc = small_read(fm->ifd, &fm->irx, why, sizeof why);
    if (rc == 0) return PS_OK;
    if (rc < 0) {
        set_err(err, errlen, "%s %s", who, why);
        return rc;
    }
    if (fm->irx.f.type == PS_FRAME_HELLO && fm->irx.f.len >= 16)
        snprintf(who, sizeof who, "the peer at %s (rank %u?, expected rank %u at %s)", fm->ipeer,
                 get32(fm->irx.buf + PS_RING_HDR + 8), fm->prev, cfg->endpoints[fm->prev]);
    rc = check_hello(&fm->irx, PS_FRAME_HELLO, cfg, fm->prev, who, err, errlen);
    if (rc != PS_OK) {
        send_reject(fm->ifd, rc, err);
        return rc;
    }
    unsigned char buf[PS_RING_HDR + PS_RING_CTRL_MAX];
    size_t n = ps__hello_build(buf, sizeof buf, PS_FRAME_HELLO_ACK, cfg->size, cfg->rank, fm->prev,
                               cfg->job_id);
    if (small_write(fm->ifd, buf, n, now_ms() + 2000) != PS_OK) {
        set_err(err, errlen, "rank %u (%s) did not take the handshake answer", fm->prev,
                cfg->endpoints[fm->prev]);
        return PS_EIO;
    }
    fm->istate = 2;
    PS_INFO("ring rank %u/%u: accepted rank %u (previous) from %s", cfg->rank, cfg->size, fm->prev,
            fm->ipeer);
    return PS_OK;
}

static void accept_one(former *fm, int lfd) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    addr_text(&ss, fm->ipeer, sizeof fm->ipeer);
    if (ss.ss_family == AF_UNIX) snprintf(fm->ipeer, sizeof fm->ipeer, "a Unix socket");
    ps__link_tune(fd, ss.ss_family != AF_UNIX);
    fm->ifd = fd;
    fm->istate = 1;
    memset(&fm->irx, 0, sizeof fm->irx);
}

int ps__links_form(const ps_ring_config *cfg, ps__links *out, char *err, size_t errlen) {
    out->next_fd = out->prev_fd = -1;
    if (cfg->size == 1) return PS_OK;
    former fm = {.cfg = cfg, .lfd = {-1, -1}, .ofd = -1, .ifd = -1, .backoff_ms = 10};
    fm.next = (cfg->rank + 1) % cfg->size;
    fm.prev = (cfg->rank + cfg->size - 1) % cfg->size;
    fm.next_unix = cfg->transport == PS_RING_UNIX ||
                   (cfg->transport == PS_RING_AUTO &&
                    is_local(cfg->endpoints[fm.next], cfg->endpoints[cfg->rank]));
    snprintf(fm.olast, sizeof fm.olast, "no answer yet");
    unsigned ct = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 60000;
    long long deadline = now_ms() + ct;
    int rc = listen_on(&fm, err, errlen);
    if (rc == PS_OK) rc = start_connect(&fm, err, errlen);
    while (rc == PS_OK && !(fm.ostate == 3 && fm.istate == 2)) {
        long long now = now_ms();
        if (now >= deadline) {
            char a[400] = "", b[400] = "";
            if (fm.ostate != 3)
                snprintf(a, sizeof a, " no connection to rank %u (next) at %s (%s);", fm.next,
                         cfg->endpoints[fm.next], fm.olast);
            if (fm.istate != 2)
                snprintf(b, sizeof b, " rank %u (previous, %s) did not connect;", fm.prev,
                         cfg->endpoints[fm.prev]);
            set_err(err, errlen, "the ring did not form in %u ms:%s%s", ct, a, b);
            size_t l = strlen(err);
            if (l > 0 && err[l - 1] == ';') err[l - 1] = '\0';
            rc = PS_ETIMEDOUT;
            break;
        }
        if (fm.ostate == 0 && now >= fm.retry_at) {
            rc = start_connect(&fm, err, errlen);
            continue;
        }
        struct pollfd pf[4];
        int np = 0, i_l0 = -1, i_l1 = -1, i_o = -1, i_i = -1;
        if (fm.istate == 0) {
            if (fm.lfd[0] >= 0)
                pf[i_l0 = np++] = (struct pollfd){.fd = fm.lfd[0], .events = POLLIN};
            if (fm.lfd[1] >= 0)
                pf[i_l1 = np++] = (struct pollfd){.fd = fm.lfd[1], .events = POLLIN};
        } else if (fm.istate == 1) {
            pf[i_i = np++] = (struct pollfd){.fd = fm.ifd, .events = POLLIN};
        }
        if (fm.ostate == 1 || fm.ostate == 2)
            pf[i_o = np++] =
                (struct pollfd){.fd = fm.ofd, .events = fm.ostate == 1 ? POLLOUT : POLLIN};
        long long until = deadline;
        if (fm.ostate == 0 && fm.retry_at < until) until = fm.retry_at;
        int wait = (int)(until - now);
        if (poll(pf, (nfds_t)np, wait < 0 ? 0 : wait) < 0) {
            if (errno == EINTR) continue;
            set_err(err, errlen, "poll: %s", strerror(errno));
            rc = PS_EIO;
            break;
        }
        if (i_l0 >= 0 && pf[i_l0].revents) accept_one(&fm, fm.lfd[0]);
        if (i_l1 >= 0 && fm.istate == 0 && pf[i_l1].revents) accept_one(&fm, fm.lfd[1]);
        if (i_i >= 0 && pf[i_i].revents) rc = in_step(&fm, err, errlen);
        if (rc == PS_OK && i_o >= 0 && pf[i_o].revents) rc = out_step(&fm, err, errlen);
    }
    if (rc != PS_OK) {
        /* tell a neighbour already handshaken why it will not hear from us */
        if (fm.ostate >= 2) send_reject(fm.ofd, rc, err);
        if (fm.istate == 2) send_reject(fm.ifd, rc, err);
        former_close(&fm);
        return rc;
    }
    ps__link_tune(fm.ofd, !fm.next_unix);
    out->next_fd = fm.ofd;
    out->prev_fd = fm.ifd;
    fm.ofd = fm.ifd = -1;
    former_close(&fm);
    PS_INFO("ring rank %u/%u: ring complete: %u ranks", cfg->rank, cfg->size, cfg->size);
    return PS_OK;
}
