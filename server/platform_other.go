//go:build !unix

package server

func setPrivateUmask() {}

// descriptorLimit is not known on this platform; the server refuses to run
// here anyway (ErrUnsupportedPlatform).
func descriptorLimit() (uint64, error) { return 1 << 16, nil }
