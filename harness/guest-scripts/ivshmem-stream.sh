# shellcheck shell=sh
# The main ivshmem job (guest_script::streaming: `cargo xtask boot`):
# stream until the host says stop; after ivshmem-prelude.sh. Set by the host:
#   MODULE_PARAMS  the module's parameters, PARAM=VALUE words (may be empty)
#   DAEMON_ARGS    the daemon's extra arguments, words (may be empty)
# Both are lists of words, split on purpose.
# shellcheck disable=SC2086
load_module $MODULE_PARAMS
# shellcheck disable=SC2086
start_daemon $DAEMON_ARGS
wait_stop
stop_daemon
collect
exit 0
