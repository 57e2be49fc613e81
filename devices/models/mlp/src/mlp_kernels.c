/*
 * mlp_kernels.c - the reference model's arithmetic (layers, loss,
 * backward, optimizer update, seeded weights), once in double and once
 * in float: mlp_kernels.h is the template of both. All arithmetic is in
 * the element type and in a fixed order, so a given layout computes the
 * same bits whatever the schedule.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include <cblas.h>

#include "mlp_internal.h"

const void *dpl__mlp_layer_input(const struct mstage *s, uint32_t slot,
				 uint32_t i, const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0;

	if (i > 0)
		return s->a[slot * nl + i - 1];
	return s->has_first ? s->x[slot] : a->input;
}

#define MLP_T double
#define MLP_SFX(x) x##_f64
#define MLP_FN(fn) fn
#define MLP_GEMM cblas_dgemm
#define MLP_NAME "f64"
#define MLP_DTYPE DPL_DTYPE_F64
#include "mlp_kernels.h"

#define MLP_T float
#define MLP_SFX(x) x##_f32
#define MLP_FN(fn) fn##f
#define MLP_GEMM cblas_sgemm
#define MLP_NAME "f32"
#define MLP_DTYPE DPL_DTYPE_F32
#include "mlp_kernels.h"
