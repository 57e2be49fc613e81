/*
 * shm_internal.h - the shared-memory transport's segment layout and the
 * helpers shared by its source files. Not installed.
 *
 * Each rank owns one POSIX shared-memory segment holding a header (its
 * pid, liveness flags, heartbeat and doorbell) and one inbound ring per
 * other rank. A ring is single-producer (the sending rank) and
 * single-consumer (the owner); its control block sits in the owner's
 * segment next to the others:
 *
 *   [ header, 4 KiB ][ ring controls, 256 B each, padded to 4 KiB ]
 *   [ ring from the 1st other rank ][ ring from the 2nd ] ...
 *
 * Rings are byte rings of 64-byte aligned frames, each opening with the
 * 64-byte struct dpl__shm_frame (see shm.c for the protocol).
 */
#ifndef DPL_SHM_INTERNAL_H
#define DPL_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DPL__SHM_MAGIC UINT64_C(0x31306d68736c7064) /* "dplshm01" */
#define DPL__SHM_VERSION 1u
#define DPL__SHM_HDR_BYTES 4096u
#define DPL__SHM_CTL_BYTES 256u
#define DPL__SHM_PAGE 4096u
#define DPL__SHM_NAME_MAX 64
/* Every segment's name starts with this (after the leading '/'). */
#define DPL__SHM_PREFIX "dpl-shm-"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
	       "shared-memory atomics must be lock-free");

struct dpl__shm_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t rank;
	uint32_t world;
	int32_t pid;
	uint64_t jobid;
	uint64_t ring_bytes;
	uint64_t seg_bytes;
	/* Set by fini: the owner left the job. */
	_Alignas(64) _Atomic uint32_t closed;
	/* CLOCK_MONOTONIC ns of the owner's last progress or wait. */
	_Alignas(64) _Atomic uint64_t heartbeat_ns;
	/* Futex word the owner sleeps on in wait; `sleeping` tells
	 * writers to ring it. */
	_Alignas(64) _Atomic uint32_t doorbell;
	_Atomic uint32_t sleeping;
};

struct dpl__shm_ctl {
	/* Written by the sender: bytes published, sends cancelled. */
	_Alignas(64) _Atomic uint64_t tail;
	_Atomic uint64_t cancels;
	/* Written by the receiver: frames it finished with. */
	_Alignas(64) _Atomic uint64_t done;
};

_Static_assert(sizeof(struct dpl__shm_hdr) <= DPL__SHM_HDR_BYTES,
	       "header fits its page");
_Static_assert(sizeof(struct dpl__shm_ctl) <= DPL__SHM_CTL_BYTES,
	       "ring control fits its slot");

/* Bytes of a segment with `world` ranks and rings of `ring` bytes. */
size_t dpl__shm_seg_bytes(uint32_t world, uint64_t ring);

/* Slot of sender `from` among the inbound rings of rank `to`. */
static inline uint32_t dpl__shm_slot(uint32_t to, uint32_t from)
{
	return from < to ? from : from - 1;
}

/* Control block and ring of slot k in a segment. */
struct dpl__shm_ctl *dpl__shm_ctl(void *seg, uint32_t k);
unsigned char *dpl__shm_ring(void *seg, uint32_t world, uint64_t ring,
			     uint32_t k);

/* "/dpl-shm-<jobid>-r<rank>-p<pid>" into buf (DPL__SHM_NAME_MAX). */
void dpl__shm_name(char *buf, uint64_t jobid, uint32_t rank, int pid);

/*
 * Create the segment `name` of `bytes` (exclusive, mode 0600, pages
 * reserved so that a full /dev/shm is an error here and not a SIGBUS
 * later) and map it. Returns 0 or DPL_EBUSY, DPL_ENOMEM, DPL_EIO with a
 * message.
 */
int dpl__shm_create(const char *name, size_t bytes, void **base);

/* Map an existing segment; DPL_ENOENT when it is not there. */
int dpl__shm_map(const char *name, size_t bytes, void **base);

/*
 * Remove the segments of processes that no longer exist (a job that
 * crashed before its ranks unlinked them). Returns how many it removed.
 */
int dpl__shm_sweep(void);

/* Whether process `pid` exists (kill(pid, 0) is not ESRCH). */
int dpl__shm_pid_alive(int pid);

#endif /* DPL_SHM_INTERNAL_H */
