/* SPDX-License-Identifier: MIT */
/*
 * Freestanding stand-in for <linux/ioctl.h>. The uapi header only names
 * _IOR/_IOW inside the ioctl number macros, which firmware never expands,
 * so nothing needs defining here.
 */
#ifndef HMBT_COMPAT_LINUX_IOCTL_H
#define HMBT_COMPAT_LINUX_IOCTL_H
#endif
