/* Short training jobs of real psworker processes for the tests of psworker's
 * training options (test_accumulate.c, test_local_sgd.c): through psd shards
 * (started here on free ports, or given), all-reduce (mirrored) or alone
 * (--no-ps), each worker's output in a log file; the chief's saved variables
 * read back. */
#ifndef PS_TEST_TRAIN_JOBS_H
#define PS_TEST_TRAIN_JOBS_H

#include <stddef.h>

typedef enum { JOB_PSD, JOB_MIRRORED, JOB_ALONE } job_kind;

typedef struct {
    job_kind kind;
    unsigned workers;
    const char *mode;        /* psd: "sync" or "async" */
    const char *ps;          /* psd: the shards' endpoints ("a,b"); NULL: start 2 fresh ones */
    const char *const *args; /* every worker's arguments after the common ones (NULL-ended) */
    const char *tag;         /* names the files: DIR/TAG.pstf, DIR/TAG-W.log */
    const char *epochs;      /* --epochs; NULL: "1" */
} job_spec;

/* Runs the job in dir to its end (bounded: 120 s); the common arguments are
 * --epochs (1 unless given) --max-test 500 --progress none --timeout 60, and --save on the
 * chief. Returns the workers' highest exit status (0: all well; a failed
 * worker's log is printed). */
int job_run(const char *dir, const job_spec *j);
/* Like job_run, and the job must succeed: returns the chief's saved variables
 * (malloc'd, *n floats, in the model's order). */
float *job_params(const char *dir, const job_spec *j, size_t *n);
/* The chief's log (DIR/TAG-0.log) in buf. */
void job_log(const char *dir, const char *tag, char *buf, size_t n);

/* Exact resume (docs/TRAINING.md): j's job for 2 epochs uninterrupted (tag TAG-whole),
 * and again stopped after its first epoch (TAG-first) and every worker restarted for
 * the second (TAG-again): through psd on shards that stay up (started here), all-reduce
 * from the chief's checkpoint. Every worker gets --checkpoint-dir (DIR/TAG-whole-ck,
 * DIR/TAG-first-ck for both halves), the chief --history and --summary. The chiefs'
 * saved variables must be equal bit for bit, their History files byte for byte, and
 * the summaries' loss_scale, skipped_steps, test_loss and test_accuracy. */
void job_expect_exact_resume(const char *dir, const job_spec *j);

double max_abs_diff(const float *x, const float *y, size_t n);

#endif
