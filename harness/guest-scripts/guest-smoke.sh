# shellcheck shell=sh
# `cargo xtask guest-smoke` (xtask/src/guest_smoke.rs): the guest runs the
# image's kernel and our modules load. Set by the host:
#   SHARE    the 9p share
#   MODULES  our modules' guest paths, space-separated, in load order
# `--run`'s commands follow this file, if any.
set -e
echo "HMBT-SMOKE uname=$(uname -r)"
uname -r > "$SHARE/uname"
for m in $MODULES; do
    insmod "$m"
    echo "HMBT-SMOKE insmod $m ok"
    lsmod > "$SHARE/lsmod"
done
# The whole kernel log, for the host to check the kernel checks are on.
dmesg > "$SHARE/dmesg"
