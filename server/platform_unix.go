//go:build unix

package server

import "golang.org/x/sys/unix"

// setPrivateUmask makes every file and directory the process creates private
// (0600/0700), whatever the stores' own wrappers do.
func setPrivateUmask() { unix.Umask(0o077) }

// descriptorLimit is the process's open-file limit (RLIMIT_NOFILE, soft).
// The Go runtime has already raised the soft limit to the hard one.
func descriptorLimit() (uint64, error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	return r.Cur, nil
}
