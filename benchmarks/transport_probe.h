/*
 * transport_probe.h - what the transport probe's two files share: the
 * options, the sizes, the results (transport_probe.c runs the ranks,
 * transport_probe_main.c parses, reports and runs memcpy).
 */
#ifndef DPL_TRANSPORT_PROBE_H
#define DPL_TRANSPORT_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include <dpl/transport.h>

#define MAX_SIZES 16
#define MAX_REPS 15
#define MiB (1024.0 * 1024.0)

#define NALL 11
extern const size_t all_sizes[NALL];

struct result {
	double p50_us[MAX_SIZES][MAX_REPS];
	double avg_us[MAX_SIZES][MAX_REPS];
	double stream[MAX_SIZES][MAX_REPS];
	char err[512];
	int failed;
};

struct opts {
	const char *transport;
	const char *label;
	const char *options;
	const char *json;
	const char *tsv;
	bool threads;
	bool memcpy_only;
	size_t min, max;
	const char *list; /* --sizes */
	bool distinct;    /* --buffers distinct */
	bool pin;         /* --pin: rank r on CPU r */
	bool repost_first; /* --repost before */
	int reps;
	int window;
	unsigned mem;     /* --mem: DPL_MEM_HOST or DPL_MEM_CUDA */
};

extern struct opts O;
extern const struct dpl_transport_ops *ops;
extern size_t sizes[MAX_SIZES];
extern size_t nsizes;
extern char boot[128];

/* Seconds of CLOCK_MONOTONIC. */
double now_s(void);
/* Median of v[0..n) (v is left as it is). */
double median(const double *v, int n);
/* Messages a streaming run of `size` sends. */
unsigned stream_msgs(size_t size);
/* A buffer of `bytes` (rounded up to pages) of memory kind O.mem, every
 * byte set to `fill`; NULL with the reason in why (transport_probe_mem.c).
 * probe_free releases it. */
void *probe_alloc(size_t bytes, int fill, char *why, size_t size);
void probe_free(void *p);
/* Run both ranks (threads or processes) over the loaded module. */
int run_transport(struct result *res);


#endif
