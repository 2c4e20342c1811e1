/* The project's one error enum: every fallible function returns PS_OK (0) or
 * one of these negative codes; ps_strerror/ps_errname describe them. */
#ifndef PS_ERROR_H
#define PS_ERROR_H

typedef enum {
    PS_OK = 0,
    PS_EINVAL = -1,      /* bad argument or configuration */
    PS_EPROTO = -2,      /* malformed message: garbage, bad frame count, bad lengths */
    PS_EVERSION = -3,    /* protocol version mismatch */
    PS_ENOENT = -4,      /* unknown variable */
    PS_ESHAPE = -5,      /* wrong shape or dtype */
    PS_ESTALE = -6,      /* push for a step that was already applied */
    PS_ENOMEM = -7,      /* allocation failed */
    PS_EIO = -8,         /* file or socket I/O failed */
    PS_ETIMEDOUT = -9,   /* no answer before the deadline */
    PS_EEXIST = -10,     /* already exists with a different definition */
    PS_EFORMAT = -11,    /* bad file format (IDX, JSON, model spec) */
    PS_EADDRINUSE = -12, /* address already in use */
    PS_ESHUTDOWN = -13,  /* server is shutting down */
    PS_EREMOTE = -14,    /* the peer answered with an error reply */
    PS_EINTERNAL = -15,  /* a bug: should never happen */
    PS_EREJOIN = -16,    /* the worker left the expected set (timed out): say Hello again */
    PS_ERESTARTED = -17, /* a shard restarted (from a checkpoint) during the request */
    PS_EBUSY = -18,      /* a limit of the server was reached (queue full): retry later */
    PS_ELOST = -19,      /* a shard lost the job's variables (restarted without them) */
    PS_ENOTPRIMARY = -20 /* a replica that is not its group's primary: ask another */
} ps_err;

/* Human-readable description of an error code; static storage. */
const char *ps_strerror(int err);
/* Uppercase code name, e.g. "ESTALE"; static storage. */
const char *ps_errname(int err);

#endif
