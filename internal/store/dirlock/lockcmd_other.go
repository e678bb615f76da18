//go:build unix && !linux

package dirlock

import "golang.org/x/sys/unix"

// setLockCmd is the record lock Pebble takes, where open file description
// locks do not exist.
const setLockCmd = unix.F_SETLK
