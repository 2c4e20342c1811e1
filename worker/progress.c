/* Keras-like progress lines (see progress.h). */
#include "progress.h"

#include <math.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ps_progress_init(ps_progress *p, ps_progress_mode mode, FILE *out, unsigned epochs,
                      unsigned replicas) {
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->out = out;
    p->epochs = epochs;
    p->replicas = replicas ? replicas : 1;
}

double ps_progress_loss(const ps_progress *p) {
    return p->samples ? p->loss_sum / (double)p->samples : 0.0;
}

double ps_progress_accuracy(const ps_progress *p) {
    return p->samples ? (double)p->correct / (double)p->samples : 0.0;
}

void ps_progress_begin_epoch(ps_progress *p, unsigned epoch, size_t steps) {
    p->epoch = epoch;
    p->steps = steps;
    p->done = p->samples = p->correct = 0;
    p->loss_sum = 0;
    p->have_final = 0;
    p->start_ns = now_ns();
    p->last_draw_ns = p->stop_ns = 0;
    p->next_plain = steps / 4 ? steps / 4 : 1;
    if (p->mode != PS_PROGRESS_NONE) {
        fprintf(p->out, "Epoch %u/%u\n", epoch + 1, p->epochs);
        fflush(p->out);
    }
}

/* Formats the line into buf. */
static void format_line(const ps_progress *p, int final, char *buf, size_t len) {
    uint64_t end = p->stop_ns ? p->stop_ns : now_ns();
    double secs = (double)(end - p->start_ns) / 1e9;
    char bar[31];
    size_t fill = p->steps ? p->done * 30 / p->steps : 30;
    for (size_t i = 0; i < 30; i++)
        bar[i] = i < fill ? '=' : '.';
    if (!final && fill < 30 && fill > 0) bar[fill - 1] = '>';
    bar[30] = 0;
    double rate = secs > 0 ? (double)p->samples * p->replicas / secs : 0;
    int w = snprintf(buf, len, "%zu/%zu [%s] - ", p->done, p->steps, bar);
    if (w < 0 || (size_t)w >= len) return;
    if (final) {
        double per_step = p->done ? secs * 1000 / (double)p->done : 0;
        w += snprintf(buf + w, len - (size_t)w, "%.0fs %.0fms/step", secs, per_step);
    } else {
        double eta = p->done ? secs / (double)p->done * (double)(p->steps - p->done) : 0;
        w += snprintf(buf + w, len - (size_t)w, "ETA: %.0fs", eta);
    }
    int job = final && p->have_final;
    if ((size_t)w < len && p->rmse) {
        double loss = job ? p->final_loss : ps_progress_loss(p);
        snprintf(buf + w, len - (size_t)w, " - loss: %.4f - rmse: %.4f - %.0f samples/s", loss,
                 sqrt(loss), rate);
        return;
    }
    if ((size_t)w < len)
        snprintf(buf + w, len - (size_t)w, " - loss: %.4f - accuracy: %.4f - %.0f samples/s",
                 job ? p->final_loss : ps_progress_loss(p),
                 job ? p->final_acc : ps_progress_accuracy(p), rate);
}

void ps_progress_set_final(ps_progress *p, double loss, double accuracy) {
    p->have_final = 1;
    p->final_loss = loss;
    p->final_acc = accuracy;
}

void ps_progress_step(ps_progress *p, float batch_loss, size_t batch, size_t correct) {
    p->done++;
    p->samples += batch;
    p->correct += correct;
    p->loss_sum += (double)batch_loss * (double)batch;
    if (p->done == p->steps) p->stop_ns = now_ns(); /* evaluation time is not training time */
    if (p->mode == PS_PROGRESS_NONE || p->done >= p->steps) return;
    char line[256];
    if (p->mode == PS_PROGRESS_TTY) {
        uint64_t t = now_ns();
        if (t - p->last_draw_ns < 100000000ull) return; /* 10 redraws a second at most */
        p->last_draw_ns = t;
        format_line(p, 0, line, sizeof line);
        fprintf(p->out, "\r%s\033[K", line);
        fflush(p->out);
    } else if (p->done >= p->next_plain && p->steps - p->done > p->steps / 8) {
        p->next_plain += p->steps / 4 ? p->steps / 4 : 1;
        format_line(p, 0, line, sizeof line);
        fprintf(p->out, "%s\n", line);
        fflush(p->out);
    }
}

void ps_progress_end_epoch(ps_progress *p, const char *extra) {
    if (p->mode == PS_PROGRESS_NONE) return;
    char line[256];
    format_line(p, 1, line, sizeof line);
    fprintf(p->out, "%s%s%s%s\n", p->mode == PS_PROGRESS_TTY ? "\r" : "", line,
            extra && *extra ? " - " : "", extra ? extra : "");
    fflush(p->out);
}
