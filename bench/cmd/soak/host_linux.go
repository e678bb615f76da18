package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// diskStatPath returns the statistics file of the whole disk that holds
// dir, or an error when dir is not on a block device (tmpfs, overlay) or the
// kernel has no such file.
func diskStatPath(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	dev := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	path, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return "", fmt.Errorf("soak: the data directory is not on a block device with statistics (%d:%d)", unix.Major(st.Dev), unix.Minor(st.Dev))
	}
	if _, err := os.Stat(filepath.Join(path, "partition")); err == nil {
		path = filepath.Dir(path) // a partition: the device is its disk
	}
	if _, err := os.Stat(filepath.Join(path, "stat")); err != nil {
		return "", err
	}
	return filepath.Join(path, "stat"), nil
}
