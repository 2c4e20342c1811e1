/* Prints, as JSON, the size of every structure of client/ps.h that the Python package
 * mirrors with ctypes (python/ps/_lib.py), and the offset and size of each of its fields
 * in declaration order: {"ps_stats": {"size": N, "fields": [["version", 0, 8], ...]}}.
 * test_abi.py compares it with the ctypes structures. */
#include <stddef.h>
#include <stdio.h>

#include "ps.h"

static int first_struct = 1, first_field;

static void begin(const char *name, size_t size) {
    printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": [", first_struct ? "{" : ",", name, size);
    first_struct = 0;
    first_field = 1;
}

static void field(const char *name, size_t offset, size_t size) {
    printf("%s\n    [\"%s\", %zu, %zu]", first_field ? "" : ",", name, offset, size);
    first_field = 0;
}

static void end(void) {
    printf("]}");
}

#define BEGIN(T) begin(#T, sizeof(T))
#define F(T, m) field(#m, offsetof(T, m), sizeof(((T *)0)->m))

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        puts("usage: abi_dump\nPrints the layout of libps's public structures as JSON.");
        return 0;
    }
    BEGIN(ps_opt_spec);
    F(ps_opt_spec, kind);
    F(ps_opt_spec, lr);
    F(ps_opt_spec, momentum);
    F(ps_opt_spec, nesterov);
    F(ps_opt_spec, beta1);
    F(ps_opt_spec, beta2);
    F(ps_opt_spec, epsilon);
    F(ps_opt_spec, rho);
    F(ps_opt_spec, weight_decay);
    F(ps_opt_spec, initial_accumulator);
    F(ps_opt_spec, clipnorm);
    F(ps_opt_spec, clipvalue);
    F(ps_opt_spec, global_clipnorm);
    F(ps_opt_spec, schedule);
    end();
    BEGIN(ps_lr_schedule);
    F(ps_lr_schedule, kind);
    F(ps_lr_schedule, decay_steps);
    F(ps_lr_schedule, decay_rate);
    F(ps_lr_schedule, staircase);
    F(ps_lr_schedule, alpha);
    F(ps_lr_schedule, warmup_target);
    F(ps_lr_schedule, warmup_steps);
    F(ps_lr_schedule, n_boundaries);
    F(ps_lr_schedule, boundaries);
    F(ps_lr_schedule, values);
    end();

    BEGIN(ps_client_tensor);
    F(ps_client_tensor, name);
    F(ps_client_tensor, shard);
    F(ps_client_tensor, rank);
    F(ps_client_tensor, shape);
    F(ps_client_tensor, param);
    F(ps_client_tensor, grad);
    F(ps_client_tensor, opt);
    end();

    BEGIN(ps_var_desc);
    F(ps_var_desc, name);
    F(ps_var_desc, rank);
    F(ps_var_desc, shape);
    end();

    BEGIN(ps_piece);
    F(ps_piece, var);
    F(ps_piece, shard);
    F(ps_piece, part);
    F(ps_piece, num_parts);
    F(ps_piece, row_begin);
    F(ps_piece, row_end);
    F(ps_piece, name);
    end();

    BEGIN(ps_var_stats);
    F(ps_var_stats, name);
    F(ps_var_stats, numel);
    F(ps_var_stats, optimizer);
    end();

    BEGIN(ps_stats);
    F(ps_stats, version);
    F(ps_stats, mode);
    F(ps_stats, shard_index);
    F(ps_stats, num_workers);
    F(ps_stats, live_workers);
    F(ps_stats, requests);
    F(ps_stats, errors);
    F(ps_stats, pushes_applied);
    F(ps_stats, stale_pushes);
    F(ps_stats, bytes_in);
    F(ps_stats, bytes_out);
    F(ps_stats, pending_pulls);
    F(ps_stats, uptime_seconds);
    F(ps_stats, vars);
    F(ps_stats, n_vars);
    F(ps_stats, updates_applied);
    F(ps_stats, workers_removed);
    F(ps_stats, dropped_pushes);
    F(ps_stats, max_staleness);
    F(ps_stats, staleness_waits);
    F(ps_stats, checkpoints);
    F(ps_stats, checkpoint_version);
    F(ps_stats, checkpoint_age_seconds);
    F(ps_stats, incarnation);
    F(ps_stats, auth_denied);
    F(ps_stats, pending_pull_bytes);
    F(ps_stats, pending_pulls_refused);
    F(ps_stats, pending_pulls_timed_out);
    F(ps_stats, pending_pulls_released);
    F(ps_stats, dropped_replies);
    F(ps_stats, loop_turns_cut);
    F(ps_stats, checkpoint_failures);
    F(ps_stats, job_id);
    F(ps_stats, push_bytes);
    F(ps_stats, tables);
    F(ps_stats, n_tables);
    F(ps_stats, live_set);
    F(ps_stats, n_live_set);
    F(ps_stats, workers_min);
    end();

    BEGIN(ps_table_stats);
    F(ps_table_stats, name);
    F(ps_table_stats, optimizer);
    F(ps_table_stats, dim);
    F(ps_table_stats, num_rows);
    F(ps_table_stats, rows);
    F(ps_table_stats, admitted);
    F(ps_table_stats, evicted);
    F(ps_table_stats, expired);
    F(ps_table_stats, refused);
    F(ps_table_stats, dropped);
    F(ps_table_stats, bytes);
    F(ps_table_stats, max_rows);
    end();

    BEGIN(ps_table_spec);
    F(ps_table_spec, name);
    F(ps_table_spec, dim);
    F(ps_table_spec, num_rows);
    F(ps_table_spec, optimizer);
    F(ps_table_spec, lr);
    F(ps_table_spec, epsilon);
    F(ps_table_spec, initial_accumulator);
    F(ps_table_spec, beta1);
    F(ps_table_spec, beta2);
    F(ps_table_spec, l1);
    F(ps_table_spec, l2);
    F(ps_table_spec, lr_power);
    F(ps_table_spec, init_lo);
    F(ps_table_spec, init_hi);
    F(ps_table_spec, seed);
    F(ps_table_spec, min_count);
    F(ps_table_spec, ttl_steps);
    F(ps_table_spec, max_rows);
    F(ps_table_spec, refuse_when_full);
    end();

    BEGIN(ps_join_info);
    F(ps_join_info, chief);
    F(ps_join_info, recreate_lost);
    F(ps_join_info, wait_ms);
    F(ps_join_info, total_steps);
    F(ps_join_info, pull);
    F(ps_join_info, lost);
    F(ps_join_info, lost_cap);
    F(ps_join_info, async);
    F(ps_join_info, version);
    F(ps_join_info, clock);
    F(ps_join_info, created);
    F(ps_join_info, n_lost);
    F(ps_join_info, lost_error);
    F(ps_join_info, waited);
    end();

    BEGIN(ps_checkpoint_info);
    F(ps_checkpoint_info, version);
    F(ps_checkpoint_info, bytes);
    F(ps_checkpoint_info, path);
    end();

    BEGIN(ps_shard_result);
    F(ps_shard_result, rc);
    F(ps_shard_result, remote);
    F(ps_shard_result, error);
    end();

    printf("\n}\n");
    return ferror(stdout) ? 1 : 0;
}
