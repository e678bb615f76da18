//go:build !(linux && cgo)

package cmalloc

// Setting says how the C allocator that Pebble's caches and memtables use
// was configured, for the startup log.
func Setting() string {
	return "Go allocator (built without cgo, Pebble allocates on the Go heap)"
}

// ReadStats returns false: the C allocator is not Pebble's here.
func ReadStats() (Stats, bool) { return Stats{}, false }
