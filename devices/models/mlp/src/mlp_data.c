/*
 * mlp_data.c - the reference model's random numbers: counter-based, from
 * a hash, so that a value depends only on (seed, purpose, indices). They
 * draw the synthetic task's samples and the initial weights.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "mlp_internal.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15u;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
	return x ^ (x >> 31);
}

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
	return mix(mix(mix(a) ^ b) ^ c);
}

/* Uniform in (0, 1]. */
static double u01(uint64_t h)
{
	return ((double)(h >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

static double gauss(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t h = hash3(a, b, c);
	double u1 = u01(h), u2 = u01(mix(h));

	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#define SALT_DATA 0x64617461u
#define SALT_TEACHER 0x74656163u
#define SALT_INIT 0x696e6974u

void dpl_mlp_sample(const struct dpl_mlp_params *p, uint64_t k, double *x,
		    uint32_t *cls, double *t)
{
	uint32_t in = p->widths[0], out = p->widths[p->layers], c, i;
	double best = -INFINITY, v;

	for (i = 0; i < in; i++)
		x[i] = gauss(p->seed ^ SALT_DATA, k, i);
	for (c = 0; c < out; c++) {
		v = 0;
		for (i = 0; i < in; i++)
			v += gauss(p->seed ^ SALT_TEACHER, c, i) * x[i];
		v /= sqrt((double)in);
		if (p->loss == DPL_MLP_MSE) {
			t[c] = tanh(v);
		} else if (v > best) {
			best = v;
			*cls = c;
		}
	}
}

double dpl__mlp_init_weight(const struct dpl_mlp_params *p, uint32_t layer,
			    uint64_t idx, uint32_t fan_in)
{
	double k = sqrt(3.0 / fan_in);
	double u = u01(hash3(p->seed ^ SALT_INIT, layer, idx));

	return (2.0 * u - 1.0) * k;
}
