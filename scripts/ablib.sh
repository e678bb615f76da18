# Shared by scripts/abdrain.sh and scripts/abcommands.sh (sourced, not run).
#
# ab_check NAME BASE: checks that FAST_DIR (default /dev/shm) is a writable
# directory and that BASE names a commit; sets fast and rev (BASE's short
# hash). NAME prefixes the messages.
ab_check() {
  fast=${FAST_DIR:-/dev/shm}
  if ! [ -d "$fast" ] || ! [ -w "$fast" ]; then
    echo "$1: $fast is not a writable directory (FAST_DIR names another tmpfs)" >&2
    exit 1
  fi
  if ! rev=$(git rev-parse --short --verify --quiet "$2^{commit}"); then
    echo "$1: $2 is not a commit" >&2
    exit 2
  fi
}
