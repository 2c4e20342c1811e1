/* A minimal HTTP/1.x server on a libuv loop for psd's metrics endpoint: GET only,
 * one request per connection, answered and closed; nothing here blocks the loop. */
#ifndef PS_HTTP_H
#define PS_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define PS_HTTP_MAX_HEADER 8192 /* request line + headers; more: 400 */
#define PS_HTTP_MAX_CONNS 64    /* at the cap a new connection closes the one idle longest */
#define PS_HTTP_REQUEST_MS 5000 /* a request must be complete this long after accept */
#define PS_HTTP_LINGER_MS 2000  /* after the reply: wait this long for the client to close */

typedef struct ps__http_server ps__http_server;

/* What a handler answers. body is malloc'd (or NULL when body_len is 0) and taken
 * over by the server; content_type is static. */
typedef struct {
    int status;
    const char *content_type;
    char *body;
    size_t body_len;
} ps__http_response;

/* Called on the loop for every well-formed GET; path is the request target
 * without its query string. Must fill r (status 500 is sent if body is NULL
 * with body_len > 0). */
typedef void (*ps__http_handler)(void *ctx, const char *path, ps__http_response *r);

/* Listens on bind:port (an IPv4 or IPv6 literal; port 0: any free one).
 * Returns PS_OK with *out set, PS_EADDRINUSE, or PS_EINVAL/PS_ENOMEM with a
 * reason in err; on error nothing is left open on the loop. */
int ps__http_server_start(uv_loop_t *loop, const char *bind, int port, ps__http_handler fn,
                          void *ctx, ps__http_server **out, char *err, size_t errlen);
/* Writes "HOST:PORT" as bound ("[v6]:PORT" for IPv6). Returns PS_OK or PS_EIO. */
int ps__http_server_address(ps__http_server *h, char *buf, size_t len);
/* Connections closed to make room for a new one (at PS_HTTP_MAX_CONNS). */
uint64_t ps__http_server_evicted(const ps__http_server *h);
/* Closes the listener and every connection; the server frees itself once the
 * loop has run their close callbacks. The handler is not called again. */
void ps__http_server_stop(ps__http_server *h);

#endif
