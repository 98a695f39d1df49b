/* SPDX-License-Identifier: MIT */
/*
 * Freestanding stand-in for <linux/types.h>: the uapi header
 * kmod/include/uapi/linux/nvme_hmb_trace.h names its fields __u8..__u64.
 * Firmware has no kernel headers, so the SDK puts this directory first on
 * the include path. The sizes are checked by _Static_assert in
 * hmb_trace_fw.c against the uapi header's own constants.
 */
#ifndef HMBT_COMPAT_LINUX_TYPES_H
#define HMBT_COMPAT_LINUX_TYPES_H
#include <stdint.h>
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
#endif
