// SPDX-License-Identifier: GPL-2.0
/*
 * Module entry: the generic core first (class, char
 * device region), then the glue that finds devices.
 */
#include <linux/module.h>
#include <linux/init.h>

#include "hmb_trace.h"

static int __init hmb_trace_init(void)
{
	int ret;

	ret = hmb_trace_core_init();
	if (ret)
		return ret;
	ret = hmb_emu_glue_init();
	if (ret)
		goto err_core;
	ret = hmb_nvme_glue_init();
	if (ret)
		goto err_emu;
	return 0;

err_emu:
	hmb_emu_glue_exit();
err_core:
	hmb_trace_core_exit();
	return ret;
}

static void __exit hmb_trace_exit(void)
{
	hmb_nvme_glue_exit();
	hmb_emu_glue_exit();
	hmb_trace_core_exit();
}

module_init(hmb_trace_init);
module_exit(hmb_trace_exit);

MODULE_DESCRIPTION("Firmware trace ring in the NVMe Host Memory Buffer (patched nvme driver, or emulated with QEMU ivshmem)");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1.0");
