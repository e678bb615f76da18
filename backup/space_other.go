//go:build !linux

package backup

func freeBytes(string) (int64, error) { return 0, errNotLinux }
