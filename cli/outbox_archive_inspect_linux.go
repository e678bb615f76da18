//go:build linux

package cli

import "golang.org/x/sys/unix"

// fdIsTerminal reports whether fd is a terminal (TCGETS succeeds on it).
func fdIsTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
