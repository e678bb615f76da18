//go:build unix

package regularfile

import "syscall"

// noFollow makes open refuse a symbolic link as the last component.
const noFollow = syscall.O_NOFOLLOW
