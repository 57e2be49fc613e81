/*
 * dpl/schedule.h - the action IR, schedule policies, lowering and the
 * validator.
 *
 * A schedule is one ordered list of actions per rank of one pipeline.
 * Stage s of S runs on rank s % R, where R is the number of ranks (files
 * may map stages otherwise); for every policy without chunks R == S,
 * for those with V chunks per rank S = V R. Replicas of a stage (data
 * parallelism inside a stage) all run the list of their stage's rank, so
 * a schedule describes one pipeline whatever the replication.
 *
 * Text form: PyTorch's torch.distributed.pipelining notation, so schedules
 * move between the two: "<stage><KIND><microbatch>", e.g. "0F3", "1B2",
 * "0I1", "0W1", "0SEND_F3", "1RECV_B2", and "<stage>REDUCE_GRAD",
 * "<stage>STEP" for the two kinds that carry no micro-batch.
 * SEND_* carry the sender's stage, RECV_* the receiver's stage, as in
 * PyTorch.
 *
 * Threads: a dpl_schedule is not internally locked. Concurrent readers are
 * safe; a writer needs exclusive access.
 */
#ifndef DPL_SCHEDULE_H
#define DPL_SCHEDULE_H

#include <stdio.h>

#include <dpl/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Action kinds. Values are stable (they are part of the saved formats). */
enum dpl_action_kind {
	DPL_ACT_F = 0,           /* forward of (stage, microbatch) */
	DPL_ACT_B = 1,           /* full backward */
	DPL_ACT_I = 2,           /* backward for the input gradient only */
	DPL_ACT_W = 3,           /* backward for the weight gradient only */
	DPL_ACT_SEND_F = 4,      /* send stage's activation to stage + 1 */
	DPL_ACT_RECV_F = 5,      /* receive stage - 1's activation */
	DPL_ACT_SEND_B = 6,      /* send stage's input gradient to stage - 1 */
	DPL_ACT_RECV_B = 7,      /* receive stage + 1's input gradient */
	DPL_ACT_REDUCE_GRAD = 8, /* reduce the stage's gradients over replicas */
	DPL_ACT_STEP = 9,        /* optimizer step of the stage */
	DPL_ACT_UNSHARD = 10,    /* gather the stage's sharded parameters */
	DPL_ACT_RESHARD = 11,    /* free them again */
	DPL_ACT_WAIT_REDUCE_GRAD = 12, /* wait for the stage's REDUCE_GRAD */
	DPL_ACT_WAIT_SEND_F = 13, /* wait until a SEND_F completed */
	DPL_ACT_WAIT_SEND_B = 14, /* wait until a SEND_B completed */
	DPL_ACT_OVERLAP_F_B = 15, /* the next F and B (or I) run together */
	DPL_ACT__COUNT = 16
};

/*
 * The kinds PyTorch's lowered ("compute_comms") schedules hold besides
 * dpl's, kept in the lists as PyTorch wrote them so files go back
 * unchanged. What the runner does with each:
 *
 * - UNSHARD / RESHARD (stage, no micro-batch): FSDP's parameter
 *   gathering. dpl's stages own their parameters whole, so the runner
 *   skips both (it counts them in its statistics and trace). The
 *   validator holds them to PyTorch's rule: per stage they alternate,
 *   UNSHARD first, and on a stage that has them every F, B, I and W runs
 *   between an UNSHARD and the next RESHARD.
 * - WAIT_REDUCE_GRAD (stage, no micro-batch): waits until the stage's
 *   gradient reduction, started by its REDUCE_GRAD, has finished. At most
 *   one per stage, after its REDUCE_GRAD and before its STEP. Without one
 *   the STEP waits, as it always has.
 * - WAIT_SEND_F / WAIT_SEND_B (stage and micro-batch of the send): wait
 *   until that SEND_F / SEND_B completed (its buffer may be reused). At
 *   most one per send, after it. Without one the runner retires the send
 *   itself (when the buffer is needed, and at the end of every step).
 * - OVERLAP_F_B (PyTorch's compound "(0F7;7B3)OVERLAP_F_B", DualPipeV):
 *   a marker whose `stage` is that of the forward it pairs and whose
 *   micro-batch is DPL_NO_MICROBATCH. The two actions right after it in
 *   the list are its parts, in order: an F, then a B or I, both of stages
 *   on this rank (in lowered lists the receives both need come before the
 *   marker and the sends they make after the second part). The runner
 *   calls the stage callbacks' `overlap` member once for the pair when
 *   they have one, else the forward and then the backward, as PyTorch's
 *   runtime does without a registered OVERLAP_F_B function; the
 *   simulator times the parts one after the other. Its text form alone
 *   is "<stage>OVERLAP_F_B" (messages, JSON); the CSV form joins the
 *   marker and its parts into PyTorch's one field.
 *
 * PyTorch's lowered lists carry no STEP (its optimizer step lies outside
 * the schedule); a lowered list without a STEP for one of its stages is
 * valid, and the runner then steps that stage after the rank's last
 * action.
 */

/* Micro-batch field of actions that have none (REDUCE_GRAD, STEP). */
#define DPL_NO_MICROBATCH UINT32_MAX

/* One action: 12 bytes, passed by value. */
struct dpl_action {
	uint32_t kind;       /* enum dpl_action_kind */
	uint32_t stage;      /* global stage index */
	uint32_t microbatch; /* or DPL_NO_MICROBATCH */
};

/* Longest text form of one action, including the terminating NUL. */
#define DPL_ACTION_TEXT_MAX 32

/*
 * dpl_action_kind_name - "F", "SEND_F", "REDUCE_GRAD", ... for a kind;
 * NULL for a value that is not a kind. Thread-safe.
 */
DPL_EXTERN const char *dpl_action_kind_name(uint32_t kind);

/*
 * dpl_action_is_compute - nonzero for F, B, I and W.
 */
DPL_EXTERN int dpl_action_is_compute(uint32_t kind);

/*
 * dpl_action_format - write the text form of `a` ("0SEND_F3") into
 * buf[0..size). Returns the length written (without the NUL), or
 * DPL_EINVAL for a malformed action or DPL_ERANGE when size is too small
 * (buf then holds ""). Thread-safe.
 */
DPL_EXTERN int dpl_action_format(struct dpl_action a, char *buf, size_t size);

/*
 * dpl_action_parse - parse exactly `len` bytes of text (no surrounding
 * blanks) into *out. Accepts everything dpl_action_format writes and every
 * action PyTorch writes that dpl models. Returns 0, or DPL_EPARSE with a
 * message naming the text in dpl_last_error(); *out is written only on
 * success. Thread-safe.
 */
DPL_EXTERN int dpl_action_parse(const char *text, size_t len,
				struct dpl_action *out);

/* Schedule policies. */
enum dpl_policy {
	DPL_POLICY_GPIPE = 0,       /* all forwards, then all backwards */
	DPL_POLICY_1F1B = 1,        /* DAPPLE policy A: warm-up min(S-s, M) */
	DPL_POLICY_1F1B_COMM = 2,   /* DAPPLE policy B: min(2(S-s)-1, M) */
	DPL_POLICY_BOUNDED = 3,     /* caller-given cap per stage */
	DPL_POLICY_INTERLEAVED = 4, /* V model chunks per rank */
	DPL_POLICY_ZB_H1 = 5,       /* zero-bubble H1: B split into I and W */
	DPL_POLICY_CUSTOM = 6,      /* loaded from a file or built by hand */
	DPL_POLICY_LOOPED_BFS = 7,  /* V chunks per rank, breadth-first */
	DPL_POLICY_INTERLEAVED_ZB = 8, /* interleaved with I/W split (ZB1P) */
	DPL_POLICY_ZBV = 9,         /* zero-bubble V: stages r and 2S-1-r */
	DPL_POLICY_ZB_H2 = 10,      /* zero-bubble H2: twice 1F1B's memory */
	DPL_POLICY_ZB_AUTO = 11,    /* zero-bubble under a memory cap */
	DPL_POLICY_DUALPIPEV = 12,  /* DualPipeV: stages r and 2S-1-r */
	DPL_POLICY__COUNT = 13
};

/*
 * dpl_policy_buildable - 1 when dpl_schedule_build() builds `p` (every
 * policy but DPL_POLICY_CUSTOM), else 0. Pure; thread-safe.
 */
DPL_EXTERN int dpl_policy_buildable(enum dpl_policy p);

/*
 * dpl_policy_chunks - how many model chunks per rank `p` takes: 0 for a
 * policy without chunks, 2 for zbv and dualpipev (always two), and 1
 * (meaning "V >= 2, from dpl_schedule_params.chunks") for interleaved,
 * looped-bfs and interleaved-zb. Pure; thread-safe.
 */
DPL_EXTERN uint32_t dpl_policy_chunks(enum dpl_policy p);

/*
 * dpl_policy_name / dpl_policy_parse - "gpipe", "1f1b", "1f1b-comm",
 * "bounded", "interleaved", "zb-h1", "custom", "looped-bfs",
 * "interleaved-zb", "zbv", "zb-h2", "zb-auto", "dualpipev".
 * dpl_policy_name returns
 * NULL for an unknown value; dpl_policy_parse returns 0 and writes *out,
 * or DPL_EINVAL naming the text (and listing the valid names).
 */
DPL_EXTERN const char *dpl_policy_name(enum dpl_policy p);
DPL_EXTERN int dpl_policy_parse(const char *name, enum dpl_policy *out);

/* Per-stage compute costs, in any time unit, for one micro-batch. */
struct dpl_stage_cost {
	double f; /* forward */
	double b; /* full backward */
	double i; /* backward-input (zb-h1); 0 means b / 2 */
	double w; /* backward-weight (zb-h1); 0 means b / 2 */
};

/*
 * Parameters of dpl_schedule_build(). Zero-initialise, then set what you
 * need; every pointer member may be NULL.
 *
 * The `bounded` policy needs a cap per stage, given one of three ways:
 * cap_mb (one value per stage), cap_all (the same value for every stage),
 * or cap_bytes + activation_bytes (a byte budget and the activation bytes
 * one micro-batch keeps alive on that stage; the cap is their quotient).
 * It returns the faster, under `costs`, of two orders that both respect
 * the cap: 1F1B with warm-up min(cap_s, S-s, M, warm-up of stage s-1), and
 * the greedy list order "run a ready backward, else a ready forward while
 * fewer than cap_s micro-batches are in flight". Ties go to the first, so
 * with cap_s >= S-s on every stage the result is exactly `1f1b`.
 *
 * `interleaved` takes chunks = V >= 2 model chunks per rank; stage index
 * chunk * S + rank (S ranks). It accepts every M >= 1. The micro-batches
 * form max(1, floor(M / S)) consecutive groups whose sizes differ by at
 * most one, the larger first (so each holds at least S micro-batches,
 * unless M < S and there is one group of M); every rank runs its forwards
 * group by group, chunk by chunk, and its backwards in the same order with
 * the chunks reversed. Rank r warms up with (V - 1) G + 2 (S - r - 1)
 * forwards, G the first group's size (capped at M V), then alternates one
 * forward and one backward. With M a multiple of S every group has S
 * micro-batches: Megatron's order, whose makespan under F = 1, B = 2 is
 * 3 M V + 3 (S - 1) chunk units. Where PyTorch's ScheduleInterleaved1F1B
 * accepts M (M divisible by its max(1, floor(M / S)) rounds, e.g. M = 6 or
 * M = 2 on 4 ranks) the lists are its lists; the other M (e.g. 9 on 4
 * ranks: groups of 5 and 4), which PyTorch refuses, run too. Groups of at
 * least S micro-batches that never grow keep the lists deadlock-free under
 * rendezvous sends (validated for every S <= 24, M <= 120, V <= 6).
 * Bound: rank r keeps at most min(M V, (V - 1) G + 2 (S - r - 1) + 1)
 * micro-batches alive over its chunks.
 *
 * `looped-bfs` (PyTorch's ScheduleLoopedBFS, breadth-first pipelining)
 * takes chunks = V >= 2 and the same stage numbering, and any M >= 1:
 * rank r runs the forwards of its chunk 0 for micro-batches 0..M-1, then
 * those of chunk 1, ..., then the backwards chunk V-1 first, each chunk's
 * micro-batches from M-1 down to 0. Every stage keeps M micro-batches
 * alive, a rank M V; under F = 1, B = 2 the makespan is
 * 3 V max(M, S) + 3 (min(M, S) - 1).
 *
 * `zb-h1` delays the W of rank r by r micro-batches (the zero-bubble
 * paper's ZB-H1, PyTorch's ZB1P with one chunk): with F = I = W its bubble
 * is a third of 1F1B's, and every stage keeps at most min(S, M)
 * micro-batches alive until their W, the peak 1F1B has on stage 0; counted
 * up to I, stage s keeps at most min(S-s, M), like 1F1B.
 *
 * `zbv` is the zero-bubble paper's ZB-V in PyTorch's
 * ScheduleZBVZeroBubble order: always 2 chunks per rank (chunks 0 or 2),
 * 2S stages, rank r holds stages r and 2S-1-r (a V), with F, I and W.
 * Any M >= 1: for M < 2S-1 the lists are those of 2S-1 micro-batches
 * without the extra ones, as PyTorch pads. Every rank keeps at most
 * 2 min(S, M) chunk micro-batches alive until their W -- with chunks of
 * half a stage, the activations 1F1B keeps on its first stage. With
 * F = I = W per chunk it finishes with PyTorch's order (S=4, M=8: 51).
 *
 * `dualpipev` is DeepSeek's DualPipeV in PyTorch's ScheduleDualPipeV
 * order, with zbv's stages (2 chunks, rank r holds r and 2S-1-r): a
 * forward of one chunk paired with the full backward of the other
 * through the steady state, zero-bubble I/W split in the cool-down.
 * PyTorch's compound OVERLAP_F_B actions are their two sub-actions in
 * order (forward first), which is what PyTorch's runtime runs unless a
 * custom function is registered for them; the lists are otherwise
 * PyTorch's, so the makespans are the same. Any M >= 1: PyTorch needs
 * M >= 2S; for M < 2S the lists are those of 2S micro-batches without
 * the extra ones. Every rank keeps at most min(2M, 2S+1) of its chunks'
 * micro-batches alive until their B or W, exactly 2S+1 once M >= 2S.
 *
 * `interleaved-zb` is PyTorch's ScheduleInterleavedZeroBubble (ZB1P with
 * chunks = V >= 2; stage index chunk * S + rank), for any M >= 1:
 * micro-batches in max(1, M / S) rounds whose sizes differ by at most one,
 * the larger first (PyTorch's equal rounds, and its lists, wherever
 * PyTorch takes M); rank r warms up with (V-1) G0 + S-1-r forwards (G0 the
 * first round's size), then runs F, I and, after r of them, the W of the
 * oldest I. Every rank keeps at most min(V M, (V-1) G0 + S) chunk
 * micro-batches alive until their W; with F = I = W and M >= S it
 * finishes at 3 V M + S - 1.
 *
 * `zb-h2` and `zb-auto` (one stage per rank, any M) run Zero Bubble's
 * greedy heuristic under a cap per stage and `costs` (F, I, W per stage):
 * in time order, a free stage runs a ready I, else a ready F while fewer
 * than cap micro-batches are alive until their W, and fills gaps with W.
 * `zb-auto` takes its cap as `bounded` does (exactly one of cap_mb,
 * cap_all, cap_bytes + activation_bytes), records it (so validation
 * enforces it) and returns the fastest, under `costs` and its transfer
 * time T (`transfer`: every activation and gradient reaches the next
 * rank T after it was made; 0 = free communication), of six greedy
 * variants planned with T, the same six planned with T = 0 when T > 0,
 * and zb-h1 where zb-h1 fits the cap: never slower than zb-h1 at a cap
 * of S or more, with or without T. `zb-h2` is one
 * variant with cap 2S (twice the peak of 1F1B's first stage and of
 * zb-h1), against zb-h1: every stage keeps at most min(2S, M)
 * micro-batches alive; with F=1, I=2, W=1 and M >= 2S it reaches the
 * lower bound (S-1) F + M (F+I+W), half of zb-h1's bubble. With
 * F = I = W zb-h1 is already at that bound. Deterministic; building
 * S=64, M=1024 takes about 0.03 s (zb-h2) and 0.2 s (zb-auto).
 */
struct dpl_schedule_params {
	uint32_t stages;       /* S >= 1 (ranks for policies with chunks) */
	uint32_t microbatches; /* M >= 1 */
	enum dpl_policy policy;
	uint32_t chunks;        /* see dpl_policy_chunks(); others 0 or 1 */
	const uint32_t *cap_mb; /* bounded: S values >= 1, or NULL */
	uint32_t cap_all;       /* bounded: one value for all, 0 = unset */
	const uint64_t *cap_bytes;        /* bounded: S byte budgets */
	const uint64_t *activation_bytes; /* bounded: S bytes / micro-batch */
	const struct dpl_stage_cost *costs; /* S costs, NULL: F=1, B=2 */
	double transfer; /* zb-auto: time an activation or its gradient
			    takes from one rank to the next, in the costs'
			    unit (finite, >= 0; 0 = free); other policies 0 */
};

/*
 * dpl_stage_cost_resolve - a stage cost with its defaults filled in: all
 * four zero means F = 1, B = 2; a zero I or W is B / 2. Pure; thread-safe.
 */
DPL_EXTERN struct dpl_stage_cost dpl_stage_cost_resolve(struct dpl_stage_cost c);

typedef struct dpl_schedule dpl_schedule;

/*
 * dpl_schedule_build - build the compute-only lists of a policy.
 * On success *out owns a new schedule (free with dpl_schedule_destroy).
 * Errors: DPL_EINVAL with the bad parameter named in dpl_last_error(),
 * DPL_ERANGE when S * M * V overflows the action count limit (2^31),
 * DPL_ENOMEM. Does not block. Thread-safe (no shared state).
 */
DPL_EXTERN int dpl_schedule_build(const struct dpl_schedule_params *p,
				  dpl_schedule **out);

/*
 * dpl_schedule_create - an empty custom schedule for `ranks` ranks,
 * `stages` stages (at least `ranks`) and `microbatches` micro-batches, to
 * be filled with dpl_schedule_append(). Stage s runs on rank s % ranks
 * until dpl_schedule_map_stage() says otherwise.
 * Errors: DPL_EINVAL naming the bad count, DPL_ENOMEM.
 */
DPL_EXTERN int dpl_schedule_create(uint32_t ranks, uint32_t stages,
				   uint32_t microbatches, dpl_schedule **out);

/*
 * dpl_schedule_map_stage - place `stage` on `rank` (V-shaped and other
 * non-modular mappings). Only while no action of that stage has been
 * appended; DPL_EINVAL otherwise or for indices out of range.
 */
DPL_EXTERN int dpl_schedule_map_stage(dpl_schedule *s, uint32_t stage,
				      uint32_t rank);

/*
 * dpl_schedule_append - append one action to a rank's list. Checks only
 * that rank, stage and micro-batch are in range and that the stage lives
 * on that rank (DPL_EINVAL otherwise); dpl_schedule_validate() checks the
 * rest. Appending any kind but F, B, I, W and the OVERLAP_F_B marker
 * marks the schedule lowered; a lowered schedule stays lowered.
 * DPL_ENOMEM when growing fails
 * (the list is then unchanged).
 */
DPL_EXTERN int dpl_schedule_append(dpl_schedule *s, uint32_t rank,
				   struct dpl_action a);

/* dpl_schedule_destroy - free a schedule; NULL is a no-op. */
DPL_EXTERN void dpl_schedule_destroy(dpl_schedule *s);

/*
 * dpl_schedule_set_policy - record the policy a loaded schedule says it
 * was built by (dpl_schedule_policy() reports it; nothing else changes).
 * DPL_EINVAL for a value that is no enum dpl_policy.
 */
DPL_EXTERN int dpl_schedule_set_policy(dpl_schedule *s, enum dpl_policy policy);

/*
 * dpl_schedule_clone - a deep copy in *out. DPL_ENOMEM on failure.
 */
DPL_EXTERN int dpl_schedule_clone(const dpl_schedule *s, dpl_schedule **out);

/* Shape accessors. Never fail on a valid schedule. */
DPL_EXTERN uint32_t dpl_schedule_ranks(const dpl_schedule *s);
DPL_EXTERN uint32_t dpl_schedule_stages(const dpl_schedule *s);
DPL_EXTERN uint32_t dpl_schedule_microbatches(const dpl_schedule *s);
DPL_EXTERN enum dpl_policy dpl_schedule_policy(const dpl_schedule *s);
/* Rank that runs `stage`; UINT32_MAX when out of range. */
DPL_EXTERN uint32_t dpl_schedule_stage_rank(const dpl_schedule *s,
					    uint32_t stage);
/* Nonzero once dpl_schedule_lower() has run (or a lowered file loaded). */
DPL_EXTERN int dpl_schedule_is_lowered(const dpl_schedule *s);

/*
 * dpl_schedule_actions - rank's list: its length in *len and a pointer
 * owned by the schedule, valid until the schedule is changed or
 * destroyed. NULL (and *len = 0) for a rank out of range.
 */
DPL_EXTERN const struct dpl_action *
dpl_schedule_actions(const dpl_schedule *s, uint32_t rank, size_t *len);

/* Total number of actions over all ranks. */
DPL_EXTERN size_t dpl_schedule_action_count(const dpl_schedule *s);

/*
 * dpl_schedule_bound - the most micro-batches stage `stage` keeps alive
 * (forward done, backward -- or W for split backwards -- not yet done) at
 * any point of its rank's list; the runner sizes its buffers from it.
 * Computed from the lists, so it holds for loaded schedules too.
 * Returns 0 for a stage out of range.
 */
DPL_EXTERN uint32_t dpl_schedule_bound(const dpl_schedule *s, uint32_t stage);

/*
 * dpl_schedule_set_cap / dpl_schedule_cap - the memory cap, in
 * micro-batches, that dpl_schedule_validate() enforces for a stage
 * (0 = none). `bounded` records the caller's caps; other policies none.
 * set_cap returns DPL_EINVAL for a stage out of range.
 */
DPL_EXTERN int dpl_schedule_set_cap(dpl_schedule *s, uint32_t stage,
				    uint32_t cap);
DPL_EXTERN uint32_t dpl_schedule_cap(const dpl_schedule *s, uint32_t stage);

/*
 * dpl_schedule_lower - add communication and gradient reduction in place
 * (an OVERLAP_F_B pair stays together: the receives of both parts go
 * before its marker, their sends after its second part):
 * SEND_F after each forward whose next stage lives on another rank and
 * the matching RECV_F on that rank, SEND_B / RECV_B likewise for input
 * gradients, one REDUCE_GRAD after each stage's last backward (B or W)
 * and one STEP per stage at the end of its rank's list. A receive is
 * placed before the compute action that precedes its consumer, so it is
 * posted one action ahead and the lists do not deadlock even when a send
 * completes only once its receive is posted (dpl_schedule_validate()
 * proves it). Errors: DPL_EINVAL if already lowered, DPL_ESCHED if the
 * compute lists are not valid (message as from dpl_schedule_validate()),
 * DPL_ENOMEM (the schedule is then unchanged).
 */
DPL_EXTERN int dpl_schedule_lower(dpl_schedule *s);

/* Where and why a schedule is invalid. */
struct dpl_schedule_issue {
	int code;              /* DPL_ESCHED or DPL_EDEADLOCK */
	uint32_t rank;         /* rank of the offending action */
	size_t position;       /* its index in the rank's list */
	struct dpl_action action;
	char message[256];     /* "rank 1, position 4 (1B2): ..." */
};

/*
 * dpl_schedule_validate - check every rule and report the first broken:
 *  1. each action's stage lives on the rank whose list holds it, its
 *     micro-batch is in range, and REDUCE_GRAD/STEP carry none;
 *  2. every (stage, micro-batch) runs F once and either B once or I and W
 *     once each; nothing else compute-wise;
 *  3. on one rank, F(s, j) follows F(s-1, j), B/I(s, j) follows F(s, j)
 *     and B/I(s+1, j), W(s, j) follows I(s, j), when those run there;
 *  4. no stage ever keeps more micro-batches alive than its cap;
 *  5. lowered lists: every SEND has exactly one matching RECV on the peer
 *     rank and vice versa, a RECV precedes its consumer and a SEND follows
 *     its producer, one REDUCE_GRAD per stage after its last backward,
 *     one STEP per stage after its REDUCE_GRAD; compute-only lists hold
 *     none of these;
 *  7. (rule checked with 1) the kinds after DPL_ACT_STEP as described
 *     above their enum: UNSHARD/RESHARD alternate per stage with compute
 *     between them, WAIT_REDUCE_GRAD once after its REDUCE_GRAD and before
 *     the STEP, WAIT_SEND_* once after its send (these four in lowered
 *     lists only), and every OVERLAP_F_B followed by its F and its B or I;
 *  6. the lists cannot deadlock: an untimed simulation where a compute
 *     action waits for its inputs and, in lowered lists, a send completes
 *     only once the peer has posted the matching receive (rendezvous)
 *     runs every action.
 * Returns 0, or the issue's code and fills *issue (when non-NULL) with
 * rank, position, action and message; the message is also left in
 * dpl_last_error(). Rule 6 reports the first blocked action of the lowest
 * blocked rank. Does not block; O(actions).
 */
DPL_EXTERN int dpl_schedule_validate(const dpl_schedule *s,
				     struct dpl_schedule_issue *issue);

#ifdef __cplusplus
}
#endif
#endif /* DPL_SCHEDULE_H */
