//go:build linux && !riffdb_mutant_recordlock

package dirlock

import "golang.org/x/sys/unix"

// setLockCmd takes an open file description lock: no close of another
// descriptor of the file releases it, and it conflicts with the record
// locks (F_SETLK) Pebble takes.
const setLockCmd = unix.F_OFD_SETLK
