package main

import (
	"os"
	"syscall"
)

// maxRSSKiB returns the ended process's ru_maxrss, which Linux reports in KiB.
func maxRSSKiB(ps *os.ProcessState) (int64, bool) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	return ru.Maxrss, true
}
