/*
 * mutant.h - the transport the conformance battery is tried on: a small,
 * correct in-process transport (`dpl_transport_mutant`) and, selected by
 * its option `mutant=N`, deliberately broken variants of it. Each mutant
 * breaks one rule of dpl/transport.h; conformance/mutants/CMakeLists.txt
 * registers one CTest test per mutant that passes only when the battery
 * fails it in the test that checks that rule.
 *
 * The transport: the ranks of a world are threads of one process that
 * meet by name (params.world; params.oob is ignored). One mutex per world
 * guards everything: a receiver's posted receives (one FIFO) and the
 * sends posted to it that nothing matched yet (its inbox, one FIFO; the
 * entries are the senders' request storage). A post matches at once
 * under the lock and the poster copies the message (every message is a
 * rendezvous: the receiver's buffer is written from the sender's), so
 * progress has nothing to move. fini cancels the rank's own requests and
 * fails its peers' requests with it (DPL_EPEER); posts to a rank that
 * left fail with DPL_EPEER. No allocation after init.
 *
 * Options: "mutant=N" (0, the default, is the correct transport); any
 * other key is DPL_EINVAL. Threads: a context is used by one thread at
 * a time; contexts of one world from several threads at once.
 */
#ifndef DPL_CONF_MUTANT_H
#define DPL_CONF_MUTANT_H

#include <dpl/transport.h>

/* The mutants (the value of the option mutant=N). */
enum conf_mutant {
	MUT_NONE = 0,           /* the correct transport */
	MUT_SEND_EARLY = 1,     /* a send completes before its data is
				   copied */
	MUT_UNEXP_LIFO = 2,     /* unexpected messages of one tag are
				   matched newest first */
	MUT_TRUNC_SILENT = 3,   /* a longer message is cut to the receive,
				   reported 0 */
	MUT_SHORT_OK = 4,       /* a shorter message completes a longer
				   receive with 0 */
	MUT_FINI_SILENT = 5,    /* fini does not fail the peers' requests
				   nor mark the rank gone */
	MUT_POSTED_LIFO = 6,    /* posted receives of one tag are matched
				   newest first */
	MUT_TWICE = 7,          /* a completion is written again into
				   storage already handed back */
	MUT_TAG_LOW32 = 8,      /* tags are matched on their low 32 bits */
	MUT_CANCEL_LIES = 9,    /* cancel turns a completed request into
				   DPL_ECANCELED */
	MUT_FINI_LEAK = 10,     /* fini leaves the rank's sends queued at
				   its peers */
	MUT_DEAD_HANG = 11,     /* posts to a rank that left are queued
				   forever */
	MUT_BAD_LENGTH = 12,    /* the length matched is the sender's
				   rounded up to 8 bytes */
	MUT_MALLOC = 13,        /* every send allocates (and frees) a
				   bounce buffer */
	MUT_COUNT = 14
};

/*
 * dpl_transport_mutant - the table (ABI DPL_TRANSPORT_ABI_VERSION,
 * caps DPL_TRANSPORT_CAP_PEER_FAILURE, no optional members). init:
 * DPL_EINVAL for a bad option or world name (>= 128 bytes), a world of
 * another size; DPL_EBUSY for a rank already in its world; DPL_ETIMEDOUT
 * when the other ranks did not join within timeout_ms.
 */
extern const struct dpl_transport_ops dpl_transport_mutant;

#endif /* DPL_CONF_MUTANT_H */
