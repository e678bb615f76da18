//go:build !unix

package reliability

import "os"

// lockFile does nothing where flock does not exist: the campaign runs its
// packages one at a time there (make reliability passes -p 1).
func lockFile(*os.File) error { return nil }
