/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Maps both BPF objects hold: the injector's (loss.bpf.c) are the real ones;
 * the daemon loads the observer (observe.bpf.c) with these reusing the
 * injector's fds (bpf_map__reuse_fd), so the observer reads the drop log and
 * stops a guarded rule in the kernel (loss_abi.h, "Guards"). Without an
 * injector they are the observer's own, one entry each, and empty.
 */
#ifndef LOSSD_SHARED_MAPS_H
#define LOSSD_SHARED_MAPS_H

#include "loss_abi.h"

/* The drop log (loss_abi.h): per TCP flow as on the wire, the last
 * LOSS_DROP_RANGES sequence ranges a rule dropped. Written only on a drop. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LOSS_DROP_FLOWS);
	__type(key, struct loss_drop_key);
	__type(value, struct loss_drop_log);
} loss_drops SEC(".maps");

/* Guards by rule slot (loss_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LOSS_MAX_GUARDED);
	__type(key, __u32);
	__type(value, struct loss_guard);
} loss_guards SEC(".maps");

/* The guards watching each port (loss_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LOSS_WATCH_PORTS);
	__type(key, __u32);
	__type(value, struct loss_guard_watch);
} loss_guard_watch SEC(".maps");

#endif /* LOSSD_SHARED_MAPS_H */
