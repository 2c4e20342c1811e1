/* A job id: what CreateVars, Welcome and checkpoints carry to tell one training job
 * from another, and what psworker and psctl take as --job-id. */
#ifndef PS_JOB_ID_H
#define PS_JOB_ID_H

#define PS_WIRE_MAX_JOB_ID 64u /* bytes in a job id (CreateVars, Welcome, checkpoints) */

/* 1 when id is a valid job id: 1..PS_WIRE_MAX_JOB_ID bytes of [A-Za-z0-9._-]; else 0. */
int ps_job_id_valid(const char *id);

#endif
