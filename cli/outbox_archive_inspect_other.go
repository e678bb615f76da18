//go:build !linux

package cli

// fdIsTerminal reports false: archive inspection refuses non-Linux platforms,
// so it never prints progress there.
func fdIsTerminal(uintptr) bool { return false }
