#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Boot a QEMU guest, load nvme-hmb-trace.ko and run hmbtrace-test in it.

Developer harness for the module until `cargo xtask` runs the guest tests
(see docs/kmod.md). Who plays the device:

* --device emu-device: the real emu-device (ivshmem server, peer 0),
  QEMU's `ivshmem-doorbell` with one vector; `ctl inject reset` freezes.
* --device builtin --ivshmem doorbell: this script is the ivshmem server
  (peer 0) and a small producer writing records by the rules of
  docs/abi.md; the module's doorbell reaches it, it raises MSI-X vector 0.
* --device builtin --ivshmem plain: `ivshmem-plain` on a /dev/shm file, the
  same producer, no interrupts.

The guest test asks for actions by printing `REQUEST freeze` (the device
freezes the ring) and `REQUEST device_del` (QMP hot-unplug). `--udev` runs
the host's udevd in the guest with kmod/udev's rule. The run fails on any
`FAIL` line, a missing summary, or a kernel log line that images/KERNEL_CHECKS
lists as a fault; the guest's kernel command line carries that file's memory
checks (docs/debug-checks.md).

Usage:
  kmod/tests/guest-run.py --kernel /boot/vmlinuz-X --module path/nvme-hmb-trace.ko \
      --test-bin target/hmb-trace/kmod/hmbtrace-test \
      [--device builtin|emu-device] [--ivshmem plain|doorbell] \
      [--remove unbind|device-del|none] [--udev]
Exit status: 0 pass, 1 test failure, 2 harness error.
"""

import argparse
import ctypes
import json
import mmap
import os
import random
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

# ---- ABI v1 constants (kmod/include/uapi/linux/nvme_hmb_trace.h) ----
HMB_RING_MAGIC = 0x54424D48
HMB_ADVERT_MAGIC = 0x41424D48
HMB_ADVERT_STATE_READY = 1
HMB_DEVICE_MAGIC = 0x44424D48  # the device's opt-in (docs/abi.md)
HMB_DEVICE_OFFSET = 64
OFF_ACK = HMB_DEVICE_OFFSET + 8  # hmb_device_block.ack_generation
HDR_SIZE = 4096
REC_HDR = 32
FLAG_OVERFLOWED = 1
FLAG_FROZEN = 2
RECORD_FLAG_PAD = 1
# Header field offsets.
OFF_MAGIC, OFF_RING_SIZE, OFF_EPOCH = 0, 16, 24
OFF_HEAD, OFF_FLAGS, OFF_NEXT_SEQ, OFF_DROPPED, OFF_OVERFLOWS = 64, 72, 80, 88, 96
OFF_TAIL = 128

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def kernel_checks():
    """images/KERNEL_CHECKS, the list every guest of the project shares:
    (kernel command-line parameters, texts that make a kernel log line a fault)."""
    cmdline, faults = [], []
    with open(os.path.join(REPO, "images", "KERNEL_CHECKS")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            kind, _, value = line.partition(" ")
            if kind == "cmdline":
                cmdline.append(value.strip())
            elif kind == "fault":
                faults.append(value.strip())
            else:
                raise SystemExit(f"harness: images/KERNEL_CHECKS: bad line {line!r}")
    return cmdline, faults


CHECKS_CMDLINE, KLOG_BAD = kernel_checks()
# SLUB reports "BUG <cache> (<taint>): <what>" (mm/slub.c slab_bug), as
# harness/src/qemu/kernel_checks.rs is_slub_report.
SLUB_REPORT = re.compile(r"BUG [^ ]+ \(.*\): ")


def is_kernel_fault(text):
    return any(b in text for b in KLOG_BAD) or SLUB_REPORT.search(text) is not None


def u64(mm, off):
    return ctypes.c_uint64.from_buffer(mm, off)


def u32(mm, off):
    return ctypes.c_uint32.from_buffer(mm, off)


class Producer(threading.Thread):
    """The device side of the ring: waits for a READY advert, produces
    records, honours a freeze request. x86 stores are not reordered with
    each other, so program order gives the release ordering the ABI needs;
    64-bit fields are written with single aligned stores (ctypes)."""

    def __init__(self, mm, interval, notify):
        super().__init__(daemon=True)
        self.mm = mm
        self.interval = interval
        self.notify = notify  # raise the guest interrupt (or None)
        self.freeze_requested = threading.Event()
        self.stop = threading.Event()
        self.doorbell = threading.Event()
        self.produced = 0
        self.rng = random.Random(1)
        # Power-on: the signature the module binds on.
        u32(mm, HMB_DEVICE_OFFSET).value = HMB_DEVICE_MAGIC

    def advert(self):
        magic, state, gen, off, length = struct.unpack_from("<IIQQQ", self.mm, 0)
        if magic != HMB_ADVERT_MAGIC or state != HMB_ADVERT_STATE_READY:
            return None
        return gen, off, length

    def run(self):
        serving = None  # generation being produced into
        frozen_gen = None
        while not self.stop.is_set():
            self.doorbell.wait(self.interval)
            self.doorbell.clear()
            ad = self.advert()
            if ad is None:
                serving = None
                # Withdrawn: we stopped writing, acknowledge its generation.
                magic, gen = struct.unpack_from("<IxxxxQ", self.mm, 0)
                if magic == HMB_ADVERT_MAGIC:
                    u64(self.mm, OFF_ACK).value = gen
                continue
            gen, off, length = ad
            epoch = u64(self.mm, off + OFF_EPOCH).value
            if epoch != gen or u32(self.mm, off + OFF_MAGIC).value != HMB_RING_MAGIC:
                continue
            if serving != gen:
                if frozen_gen is not None and gen <= frozen_gen:
                    continue  # after a freeze only a higher generation restarts us
                serving = gen
            if self.freeze_requested.is_set():
                self.freeze_requested.clear()
                flags = u32(self.mm, off + OFF_FLAGS)
                flags.value = flags.value | FLAG_FROZEN
                frozen_gen = gen
                serving = None
                self.kick()
                continue
            for _ in range(self.rng.randint(1, 4)):
                self.produce(off, length - HDR_SIZE)
            self.kick()

    def kick(self):
        if self.notify:
            self.notify()

    def produce(self, off, ring_size):
        mm = self.mm
        data = off + HDR_SIZE
        head_f, tail_f = u64(mm, off + OFF_HEAD), u64(mm, off + OFF_TAIL)
        seq_f, flags_f = u64(mm, off + OFF_NEXT_SEQ), u32(mm, off + OFF_FLAGS)
        head, tail, seq = head_f.value, tail_f.value, seq_f.value
        payload = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(0, 200)))
        size = (REC_HDR + len(payload) + 7) & ~7
        pos = head & (ring_size - 1)
        room = ring_size - pos
        filler = 0 if room >= size else room
        if ring_size - (head - tail) < filler + size:
            seq_f.value = seq + 1
            u64(mm, off + OFF_DROPPED).value += 1
            if not flags_f.value & FLAG_OVERFLOWED:
                u64(mm, off + OFF_OVERFLOWS).value += 1
                flags_f.value = flags_f.value | FLAG_OVERFLOWED
            return
        if filler >= REC_HDR:
            struct.pack_into("<IHHQQII", mm, data + pos, room - REC_HDR, 0, RECORD_FLAG_PAD, 0, 0, 0, 0)
        if filler:
            pos = 0
        rec = struct.pack("<IHHQQII", len(payload), 0x10, 0, seq, time.monotonic_ns(), 0, 0)
        body = rec + payload + bytes(size - REC_HDR - len(payload))
        mm[data + pos:data + pos + size] = body
        seq_f.value = seq + 1
        head_f.value = head + filler + size
        flags_f.value = flags_f.value & ~FLAG_OVERFLOWED
        self.produced += 1


class IvshmemServer(threading.Thread):
    """Minimal ivshmem server (QEMU docs/specs/ivshmem-spec.rst): we are
    peer 0 with one vector (the module's doorbell), the QEMU client is peer 1
    with one vector (the guest's MSI-X vector 0)."""

    PEER_SELF, PEER_QEMU = 0, 1

    def __init__(self, path, shm_fd, producer):
        super().__init__(daemon=True)
        self.path = path
        self.shm_fd = shm_fd
        self.producer = producer
        self.own_efd = os.eventfd(0, os.EFD_NONBLOCK)
        self.guest_efd = os.eventfd(0, os.EFD_NONBLOCK)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(1)
        self.conn = None
        self.doorbells = 0
        self.interrupts = 0

    def send(self, value, fd=None):
        msg = struct.pack("<q", value)
        if fd is None:
            self.conn.sendall(msg)
        else:
            socket.send_fds(self.conn, [msg], [fd])

    def interrupt_guest(self):
        self.interrupts += 1
        os.eventfd_write(self.guest_efd, 1)

    def run(self):
        self.conn, _ = self.sock.accept()
        self.send(0)  # protocol version
        self.send(self.PEER_QEMU)  # the client's own id
        self.send(-1, self.shm_fd)  # the shared memory
        self.send(self.PEER_SELF, self.own_efd)  # our doorbell vector 0
        self.send(self.PEER_QEMU, self.guest_efd)  # its own vector 0: last
        while True:
            ready, _, _ = select.select([self.own_efd, self.conn], [], [])
            if self.conn in ready and not self.conn.recv(64):
                return  # QEMU went away
            if self.own_efd in ready:
                try:
                    os.eventfd_read(self.own_efd)
                except BlockingIOError:
                    continue
                self.doorbells += 1
                self.producer.doorbell.set()


def emu_ctl(binary, ctl, *request):
    """One emu-device control request; returns its JSON answer (or error text)."""
    r = subprocess.run([binary, "ctl", "-c", ctl, *request], capture_output=True, text=True, timeout=30)
    return (r.stdout or r.stderr).strip().replace("\n", " ")


def qmp_device_del(path, dev_id):
    """Hot-unplug a device through QMP; returns QEMU's answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        f = s.makefile("rw")
        f.readline()  # greeting
        for cmd in ({"execute": "qmp_capabilities"},
                    {"execute": "device_del", "arguments": {"id": dev_id}}):
            f.write(json.dumps(cmd) + "\n")
            f.flush()
            while True:
                reply = json.loads(f.readline())
                if "return" in reply or "error" in reply:
                    break
        return reply


INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /run && mount -t tmpfs tmpfs /run
echo "GUEST kernel $(uname -r)"
if [ -x /lib/systemd/systemd-udevd ]; then
    /lib/systemd/systemd-udevd --daemon 2>/dev/null || echo "FAIL udevd: exit $?"
fi
if insmod /nvme-hmb-trace.ko {modargs}; then echo "ok insmod"; else echo "FAIL insmod: exit $?"; fi
[ -x /lib/systemd/systemd-udevd ] && /bin/udevadm settle --timeout=20
grep -i hmb /proc/interrupts | sed 's/^/GUEST irq /'
/hmbtrace-test {testargs}
echo "GUEST test-exit $?"
grep -i hmb /proc/interrupts | sed 's/^/GUEST irq /'
if rmmod nvme_hmb_trace; then echo "ok rmmod_after_close"; else echo "FAIL rmmod_after_close: exit $?"; fi
if [ -e /dev/nvme-hmb-trace0 ]; then echo "FAIL node_gone_after_rmmod: still there"; else echo "ok node_gone_after_rmmod"; fi
dmesg | sed 's/^/KLOG /'
echo "GUEST done"
poweroff -f
"""


UDEV_GID = 990  # group hmbtrace in the guest's /etc/group


def add_udev(root, rules):
    """The host's udevd (a dynamic binary) with its libraries, our rule and a
    group database, so the guest checks what udev makes of the node."""
    udevadm = shutil.which("udevadm")
    if not udevadm:
        raise SystemExit("harness: --udev needs udevadm on the host")
    libs = subprocess.run(["ldd", udevadm], check=True, capture_output=True, text=True).stdout
    for line in libs.splitlines():
        path = next((w for w in line.split() if w.startswith("/")), None)
        if path:
            dst = os.path.join(root, path.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(path, dst)
    os.makedirs(os.path.join(root, "lib/systemd"), exist_ok=True)
    os.makedirs(os.path.join(root, "etc/udev/rules.d"), exist_ok=True)
    shutil.copy(udevadm, os.path.join(root, "bin/udevadm"))
    os.symlink("/bin/udevadm", os.path.join(root, "lib/systemd/systemd-udevd"))
    shutil.copy(rules, os.path.join(root, "etc/udev/rules.d", os.path.basename(rules)))
    with open(os.path.join(root, "etc/group"), "w") as f:
        f.write(f"root:x:0:\nhmbtrace:x:{UDEV_GID}:\n")
    with open(os.path.join(root, "etc/passwd"), "w") as f:
        f.write("root:x:0:0:root:/:/bin/sh\n")


def build_initramfs(work, module, test_bin, modargs, testargs, udev_rules=None):
    root = os.path.join(work, "root")
    for d in ("bin", "proc", "sys", "dev", "run"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    if udev_rules:
        add_udev(root, udev_rules)
    busybox = shutil.which("busybox")
    if not busybox:
        raise SystemExit("harness: busybox (static) not found")
    shutil.copy(busybox, os.path.join(root, "bin/busybox"))
    shutil.copy(module, os.path.join(root, "nvme-hmb-trace.ko"))
    shutil.copy(test_bin, os.path.join(root, "hmbtrace-test"))
    init = os.path.join(root, "init")
    with open(init, "w") as f:
        f.write(INIT.format(modargs=modargs, testargs=testargs))
    os.chmod(init, 0o755)
    os.chmod(os.path.join(root, "hmbtrace-test"), 0o755)
    out = os.path.join(work, "initramfs.cpio.gz")
    files = subprocess.run(["find", "."], cwd=root, check=True, capture_output=True).stdout
    cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=files,
                          check=True, capture_output=True).stdout
    with open(out, "wb") as f:
        f.write(subprocess.run(["gzip", "-1"], input=cpio, check=True, capture_output=True).stdout)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--test-bin", required=True)
    ap.add_argument("--ivshmem", choices=("plain", "doorbell"), default="doorbell")
    ap.add_argument("--hmb-mib", type=int, default=32)
    ap.add_argument("--modargs", default="", help="insmod parameters, e.g. ring_size=65536")
    ap.add_argument("--interval", type=float, default=0.05, help="producer period in seconds")
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--qemu", default="qemu-system-x86_64")
    ap.add_argument("--remove", choices=("unbind", "device-del", "none"), default="unbind",
                    help="how the guest test removes the device while it is open and mapped")
    ap.add_argument("--device", choices=("builtin", "emu-device"), default="builtin",
                    help="who plays the device: this script, or the real emu-device (implies --ivshmem doorbell)")
    ap.add_argument("--emu-device", default=os.path.join(REPO, "target", "debug", "emu-device"),
                    help="emu-device binary (default: target/debug/emu-device)")
    ap.add_argument("--udev", action="store_true",
                    help="run the host's udevd in the guest with kmod/udev's rule and check the node's group")
    ap.add_argument("--extra-test-args", default="")
    args = ap.parse_args()
    for p in (args.kernel, args.module, args.test_bin):
        if not os.path.isfile(p):
            print(f"harness: {p} does not exist", file=sys.stderr)
            return 2

    work = tempfile.mkdtemp(prefix="hmbtrace-guest-")
    shm_path = f"/dev/shm/hmbtrace-{os.getpid()}"
    try:
        testargs = f"--freeze --remove {args.remove}"
        if args.ivshmem == "doorbell" or args.device == "emu-device":
            testargs += " --irq"
        rules = None
        if args.udev:
            rules = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "udev",
                                 "60-nvme-hmb-trace.rules")
            testargs += f" --gid {UDEV_GID}"
        testargs = (testargs + " " + args.extra_test_args).strip()
        initrd = build_initramfs(work, args.module, args.test_bin, args.modargs, testargs, rules)
        shm_fd = os.open(shm_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(shm_fd, args.hmb_mib << 20)
        mm = mmap.mmap(shm_fd, args.hmb_mib << 20)

        server = None
        qmp_path = os.path.join(work, "qmp.sock")
        producer = Producer(mm, args.interval, None)
        qemu = [args.qemu, "-accel", "tcg", "-m", "512", "-smp", "1", "-nographic", "-no-reboot",
                "-kernel", args.kernel, "-initrd", initrd,
                "-append", " ".join(["console=ttyS0 panic=-1 quiet loglevel=4 oops=panic"] + CHECKS_CMDLINE),
                "-qmp", f"unix:{qmp_path},server=on,wait=off"]
        emu = None
        if args.device == "emu-device":
            if not os.access(args.emu_device, os.X_OK):
                print(f"harness: {args.emu_device} is not executable (cargo build -p hmb-emu-device)",
                      file=sys.stderr)
                return 2
            args.ivshmem = "emu-device"
            sock = os.path.join(work, "ivshmem.sock")
            ctl = os.path.join(work, "ctl.sock")
            emu_log = open(os.path.join(work, "emu-device.log"), "w")
            emu = subprocess.Popen([args.emu_device, "serve", "--socket", sock, "--control", ctl,
                                    "--hmb-size", f"{args.hmb_mib}M", "--vectors", "1",
                                    "--workload", "ssd", "--seed", "1", "--rate", "2000"],
                                   stdout=emu_log, stderr=subprocess.STDOUT)
            for _ in range(100):
                if os.path.exists(sock) and os.path.exists(ctl):
                    break
                time.sleep(0.05)
            else:
                print("harness: emu-device did not create its sockets", file=sys.stderr)
                emu.kill()
                return 2
            qemu += ["-chardev", f"socket,path={sock},id=ivs",
                     "-device", "ivshmem-doorbell,chardev=ivs,vectors=1,id=hmb0"]
        elif args.ivshmem == "plain":
            qemu += ["-object", f"memory-backend-file,id=hmb,share=on,mem-path={shm_path},size={args.hmb_mib}M",
                     "-device", "ivshmem-plain,memdev=hmb,id=hmb0"]
        else:
            sock = os.path.join(work, "ivshmem.sock")
            server = IvshmemServer(sock, shm_fd, producer)
            producer.notify = server.interrupt_guest
            server.start()
            qemu += ["-chardev", f"socket,path={sock},id=ivs",
                     "-device", "ivshmem-doorbell,chardev=ivs,vectors=1,id=hmb0"]
        if emu is None:
            producer.start()

        try:
            proc = subprocess.Popen(qemu, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        except OSError as e:
            print(f"harness: cannot run {args.qemu}: {e}", file=sys.stderr)
            if emu:
                emu.kill()
            return 2
        timer = threading.Timer(args.timeout, proc.kill)
        timer.start()
        oks, fails, klog_bad, summary, done = [], [], [], None, False
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\r\n")
            print(line, flush=True)
            text = line.strip()
            if text.startswith("ok "):
                oks.append(text[3:])
            elif text.startswith("FAIL "):
                fails.append(text[5:])
            elif text.startswith("summary:"):
                summary = text
            elif text == "REQUEST freeze" and emu:
                print(f"harness: emu-device inject reset: {emu_ctl(args.emu_device, ctl, 'inject', 'reset')}",
                      flush=True)
            elif text == "REQUEST freeze":
                producer.freeze_requested.set()
                producer.doorbell.set()
            elif text == "REQUEST device_del":
                print(f"harness: QMP device_del: {qmp_device_del(qmp_path, 'hmb0')}", flush=True)
            elif text == "GUEST done":
                done = True
                if emu:
                    print(f"harness: emu-device stats: {emu_ctl(args.emu_device, ctl, 'stats')}", flush=True)
            if is_kernel_fault(text):
                klog_bad.append(text[5:] if text.startswith("KLOG ") else text)
        proc.wait()
        timer.cancel()
        producer.stop.set()
        if emu:
            try:
                emu.wait(timeout=10)
            except subprocess.TimeoutExpired:
                emu.kill()
            with open(os.path.join(work, "emu-device.log")) as f:
                for line in f:
                    print(f"emu-device: {line.rstrip()}")
            if emu.returncode != 0:
                print(f"harness: emu-device exited with {emu.returncode}")
        device = ("emu-device" if emu else f"builtin producer wrote {producer.produced} records"
                  + (f", doorbells {server.doorbells}, interrupts {server.interrupts}" if server else ""))
        print(f"harness: {len(oks)} ok, {len(fails)} failed; {device}")
        if server:
            with open(f"/proc/self/fdinfo/{server.guest_efd}") as f:
                print("harness: guest eventfd", [l.strip() for l in f if "count" in l])
        problems = []
        if not done:
            problems.append("guest did not finish (timeout or crash)")
        if summary is None:
            problems.append("hmbtrace-test printed no summary")
        problems += [f"FAIL {f}" for f in fails]
        problems += [f"kernel log: {k}" for k in klog_bad]
        for p in problems:
            print(f"harness: {p}")
        print("harness: PASS" if not problems else "harness: FAIL")
        return 0 if not problems else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.path.exists(shm_path):
            os.unlink(shm_path)


if __name__ == "__main__":
    sys.exit(main())
