//go:build !linux

package backup

import "errors"

var errNotLinux = errors.New("backup: backups and restores need Linux")

func checkRoot(root string) error {
	if root == "" {
		return ErrNoRoot
	}
	return errNotLinux
}

func device(string) (uint64, error)        { return 0, errNotLinux }
func renameExchange(string, string) error  { return errNotLinux }
func renameNoReplace(string, string) error { return errNotLinux }
