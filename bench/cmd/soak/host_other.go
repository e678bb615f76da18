//go:build !linux

package main

import "errors"

// diskStatPath: disk statistics are read from Linux's /sys/dev/block only;
// elsewhere the soak leaves the disk columns empty.
func diskStatPath(string) (string, error) {
	return "", errors.New("soak: disk statistics are read on Linux only")
}
