//go:build unix

package server

import "golang.org/x/sys/unix"

// setPrivateUmask makes every file and directory the process creates private
// (0600/0700), whatever the stores' own wrappers do.
func setPrivateUmask() { unix.Umask(0o077) }
