/*
 * validate.h - what the validator's two sources share (validate.c: rules
 * 1-6; validate_kinds.c: rule 7, the kinds PyTorch's lowered lists add).
 */
#ifndef DPL_VALIDATE_INTERNAL_H
#define DPL_VALIDATE_INTERNAL_H

#include "internal.h"

/* Per (stage, micro-batch) state bits. */
enum {
	ST_F = 1u << 0,      /* F seen / done */
	ST_B = 1u << 1,      /* B seen / done */
	ST_I = 1u << 2,      /* I seen / done */
	ST_W = 1u << 3,      /* W seen / done */
	ST_SEND_F = 1u << 4, /* SEND_F of this stage seen / done */
	ST_RECV_F = 1u << 5, /* RECV_F of this stage seen / posted */
	ST_SEND_B = 1u << 6,
	ST_RECV_B = 1u << 7,
};

struct dpl__vctx {
	const dpl_schedule *s;
	struct dpl_schedule_issue *issue;
	uint16_t *st; /* [S * M] */
};

/* Fill v->issue (if any) and the thread's error with "rank R, position
 * P (action): why"; returns code. */
int dpl__vreport(struct dpl__vctx *v, int code, uint32_t rank, size_t pos,
		 struct dpl_action a, const char *fmt, ...) DPL__PRINTF(6, 7);

/* Rule 7 over every list, after rules 1-5 passed (stages and ranks are
 * in range). 0, DPL_ESCHED with the issue, or DPL_ENOMEM. */
int dpl__validate_kinds(struct dpl__vctx *v);

#endif
