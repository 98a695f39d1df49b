/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The only place that knows kernel API differences
 * between the kernels the module supports (Debian 6.1, 6.12 and 7.x).
 * Everything else calls the newest spelling.
 */
#ifndef HMB_TRACE_COMPAT_H
#define HMB_TRACE_COMPAT_H

#include <linux/version.h>
#include <linux/mm.h>
#include <linux/device.h>

/*
 * The ring protocol loads and stores 64-bit head/tail/epoch words with
 * single acquire/release accesses (a 32-bit kernel would tear them), and
 * mmap, the fault handler and the slice alignment assume that the 4096-byte
 * ring header page is exactly one page.
 */
#if !defined(CONFIG_64BIT) || PAGE_SHIFT != 12
#error "nvme-hmb-trace needs a 64-bit kernel with 4 KiB pages"
#endif

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
