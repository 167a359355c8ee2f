/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The observer's event ring and its per-CPU counters (ring_lost...): defined
 * once for observe.bpf.c and for the benchmark's synthetic producer
 * (bench/ring_producer.bpf.c), which reuses a running lossd's maps by fd.
 */
#ifndef LOSSD_OBS_RING_H
#define LOSSD_OBS_RING_H

#include "observe_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} obs_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, OBS_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} obs_counters SEC(".maps");

#endif
