/* In-process driver for psd's request path, shared by the libFuzzer target
 * (fuzz_request.c) and the regression test (tests/unit/test_fuzz_regressions.c):
 * turns a byte string into messages and feeds them to ps__server_dispatch of a
 * real shard whose ROUTER is bound to inproc://; a DEALER reads the replies.
 *
 * Input format:
 *   byte 0    flags: bits 0-1 which shard (PS_FUZZ_SHARD_*), then PS_FUZZ_F_*
 *   raw       (PS_FUZZ_F_RAW) the rest is the header frame of one message
 *   framed    otherwise, records [u16 little-endian][bytes]: the low 15 bits
 *             are the length (cut to what is left), bit 15 ends the message;
 *             a message also ends after PS_FUZZ_MAX_FRAMES records. The first
 *             record of a message is its header frame, the others payloads.
 *             No record at all: one message without a header frame.
 * Every message gets frame 0 = the identity (the DEALER's, or an unknown
 * peer's with PS_FUZZ_F_GHOST), and is dispatched, then the replies drained. */
#ifndef PS_FUZZ_HARNESS_H
#define PS_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "server.h"

enum {
    PS_FUZZ_SHARD_SYNC = 0,   /* sync, 2 workers */
    PS_FUZZ_SHARD_ASYNC = 1,  /* async, 2 workers, checkpoints */
    PS_FUZZ_SHARD_BACKUP = 2, /* sync, 2 workers, --replicas-to-aggregate 1, checkpoints */
    PS_FUZZ_SHARD_STALE = 3,  /* async, 2 workers, --staleness 1 */
    PS_FUZZ_SHARDS = 4
};

#define PS_FUZZ_F_RAW 0x04u       /* the rest of the input is one header frame */
#define PS_FUZZ_F_GHOST 0x08u     /* identity of a peer that is not connected */
#define PS_FUZZ_F_MISALIGN 0x10u  /* payload frames start at an odd address */
#define PS_FUZZ_F_TRUNCATED 0x20u /* as ps_frames_recv marks too many frames */
#define PS_FUZZ_F_FRESH 0x40u     /* reset the shard before this input */

#define PS_FUZZ_MAX_FRAMES 8u    /* records per message (header + payloads) */
#define PS_FUZZ_MAX_MESSAGES 16u /* messages per input */
#define PS_FUZZ_MAX_PENDING 64u  /* deferred pulls kept before a reset */

typedef struct {
    ps_server srv;
    void *dealer; /* in srv.zctx, connected to the ROUTER over inproc:// */
    int open;
    char ckpt_dir[1100]; /* "": no checkpoints */
} ps_fuzz_shard;

typedef struct {
    uv_loop_t loop; /* handed to ps_server_init; never run */
    ps_fuzz_shard shards[PS_FUZZ_SHARDS];
    char tmp_dir[1024];        /* parent of the checkpoint directories */
    unsigned long reset_every; /* inputs per shard between resets (0: never) */
    unsigned long inputs[PS_FUZZ_SHARDS];
    /* Replies the DEALER received since ps_fuzz_open (or the caller zeroed them). */
    uint64_t replies, error_replies;
} ps_fuzz;

/* Creates the shards (each with --max-vars 10 and variables "w" [4,3] SGD,
 * "b" [3] momentum and "e" [2,2,2] Adam) and a temp directory for checkpoints under $TMPDIR (or
 * /dev/shm, else /tmp). Returns PS_OK, or an error with a reason in err. */
int ps_fuzz_open(ps_fuzz *fz, char *err, size_t errlen);
/* Feeds one input (format above). Resets a shard that stopped (Shutdown),
 * holds more than PS_FUZZ_MAX_PENDING deferred pulls, or served reset_every
 * inputs. Never fails: what it cannot reopen it reports on stderr and skips. */
void ps_fuzz_input(ps_fuzz *fz, const uint8_t *data, size_t size);
/* Closes and reopens one shard (fresh store, version 0, no checkpoints). */
int ps_fuzz_reset(ps_fuzz *fz, unsigned shard, char *err, size_t errlen);
/* Sends Stats to a shard through dispatch; PS_OK when a StatsReply came back. */
int ps_fuzz_ping(ps_fuzz *fz, unsigned shard);
/* Frees everything ps_fuzz_open made, including the temp directory. */
void ps_fuzz_close(ps_fuzz *fz);

#endif
