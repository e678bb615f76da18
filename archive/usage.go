package archive

import (
	"errors"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// Usage is a cheap snapshot of the archive's size, read without scanning.
type Usage struct {
	// Records and EncodedBytes are the durable accounting (Σ Charge).
	Records, EncodedBytes int64
	// QuotaEncodedBytes is the configured quota.
	QuotaEncodedBytes int64
	// AllocatedBytes is the physical space of the store's files, which is
	// not charged to the quota; -1 when it could not be measured.
	AllocatedBytes int64
}

// Records returns the durable record count (a lock-free read, no I/O).
func (s *Store) Records() int64 { return s.records.Load() }

// Usage returns the durable accounting, the quota and the allocated bytes,
// without scanning records.
func (s *Store) Usage() Usage {
	return Usage{
		Records:           s.records.Load(),
		EncodedBytes:      s.encoded.Load(),
		QuotaEncodedBytes: s.quota,
		AllocatedBytes:    s.allocated(),
	}
}

func (s *Store) allocated() int64 {
	n, err := storeAllocated(s.fs, s.realFS, s.storeDir)
	if err != nil {
		s.log.Warn("archive allocated bytes unavailable", zap.Error(err))
		return -1
	}
	return n
}

// storeAllocated measures physical usage: allocated blocks on the real
// filesystem, Σ file sizes on a test filesystem.
func storeAllocated(fs vfs.FS, real bool, storeDir string) (int64, error) {
	if real {
		return allocatedBytes(storeDir)
	}
	names, err := fs.List(storeDir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		fi, err := fs.Stat(fs.PathJoin(storeDir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}
