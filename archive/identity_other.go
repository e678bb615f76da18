//go:build !linux

package archive

// storeInstance always fails with ErrUnsupportedPlatform.
func storeInstance(string) ([]byte, error) { return nil, ErrUnsupportedPlatform }
