/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * When a ring buffer submit wakes the reader: at most once per
 * OBS_WAKEUP_NS, or when OBS_WAKEUP_BYTES wait. A wakeup per event cost more
 * than the event (docs/observer.md); the reader polls on a short timeout
 * while events flow, so none waits long.
 */
#ifndef LOSSD_RING_WAKEUP_H
#define LOSSD_RING_WAKEUP_H

#include "observe_abi.h"

static __always_inline __u64 ring_wakeup_flag(void *ring, __u64 *last_wakeup_ns, __u64 now)
{
	if (now - *last_wakeup_ns >= OBS_WAKEUP_NS ||
	    bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= OBS_WAKEUP_BYTES) {
		*last_wakeup_ns = now; /* racy across CPUs: at worst one wakeup more */
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

#endif
