/* psd: a parameter-server shard. Parses its configuration (flags or
 * TF_CONFIG), binds, and serves until SIGTERM/SIGINT or a Shutdown request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifetime.h"
#include "log.h"
#include "ps_error.h"
#include "server.h"

int main(int argc, char **argv) {
    ps_ignore_sigpipe(); /* a dead supervisor's pipe must not kill us before the checkpoint */
    ps_server_config cfg;
    char err[512];
    int rc = ps_server_config_parse(argc, argv, getenv("TF_CONFIG"), &cfg, err, sizeof err);
    if (rc == 1) return 0;
    if (rc != PS_OK) {
        fprintf(stderr, "psd: %s\n", err);
        return 2;
    }
    ps_log_set_level((ps_log_level)cfg.log_level);
    char tag[32];
    snprintf(tag, sizeof tag, "psd[%ld]", cfg.shard);
    ps_log_set_tag(tag);
    ps_die_with_parent();

    uv_loop_t loop;
    uv_loop_init(&loop);
    ps_server s;
    rc = ps_server_init(&s, &loop, &cfg, err, sizeof err);
    if (rc != PS_OK) {
        fprintf(stderr, "psd: %s\n", err);
        ps_server_free(&s);
        uv_loop_close(&loop);
        return 2;
    }
    int run_rc = ps_server_run(&s);
    PS_INFO("stopped at version %llu after %llu requests (%llu errors)",
            (unsigned long long)s.shard.step.version, (unsigned long long)s.stats.requests,
            (unsigned long long)s.stats.errors);
    int ckpt_failed = s.final_ckpt_failed;
    ps_server_free(&s);
    if (uv_loop_close(&loop) != 0) PS_WARN("loop closed with handles still open");
    if (run_rc != PS_OK) return 2; /* the metrics port could not be bound */
    return ckpt_failed ? 1 : 0;    /* 1: the checkpoint promised at SIGTERM/SIGINT failed */
}
