//go:build !linux

package main

import "os"

// maxRSSKiB is unavailable off Linux (units and availability differ).
func maxRSSKiB(*os.ProcessState) (int64, bool) { return 0, false }
