/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hmb_trace_compat.h - the only place that knows kernel API differences
 * between the kernels the module supports (Debian 6.1, 6.12 and 7.x).
 * Everything else calls the newest spelling.
 */
#ifndef HMB_TRACE_COMPAT_H
#define HMB_TRACE_COMPAT_H

#include <linux/version.h>
#include <linux/mm.h>
#include <linux/device.h>

/* vm_flags became read-only behind vm_flags_{set,clear}() in 6.3. */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}

static inline void vm_flags_clear(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags &= ~flags;
}
#endif

/* class->devnode() takes a const device since 6.2. */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
#define HMB_DEVNODE_CONST
#else
#define HMB_DEVNODE_CONST const
#endif

/*
 * class_create() lost its owner argument in 6.4; the module sidesteps that
 * by registering a static struct class with class_register(), whose
 * signature only gained a const (compatible) in 6.4.
 */

#endif /* HMB_TRACE_COMPAT_H */
