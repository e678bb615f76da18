// Package regularfile opens and reads the files riffdb is given or finds on
// disk (TLS material, contracts, backup manifests and markers, store files
// to copy) so that nothing can make it wait: the file is opened with
// O_NONBLOCK, so a FIFO without a writer opens at once instead of blocking
// an OS thread until one appears, and it is examined with fstat on the open
// descriptor, so only a regular file is read. Checking the descriptor, not
// the path, leaves no window in which the path can be replaced.
//
// Errors never contain the path: callers name the file in their own words.
package regularfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
)

// ErrNotRegular is returned (wrapped) when the path names something other
// than a regular file: a FIFO, a socket, a device, a directory, or, with
// NoFollow, a symbolic link.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned (wrapped) by Read when the file holds more than
// the bytes allowed.
var ErrTooLarge = errors.New("the file is too large")

// Links says whether a symbolic link as the path's last component is
// followed.
type Links int

const (
	// Follow follows a symbolic link to a regular file, as operators expect
	// of the paths they configure.
	Follow Links = iota
	// NoFollow refuses a symbolic link (ErrNotRegular), for files riffdb
	// wrote itself and so never made links.
	NoFollow
)

// Open opens the file at path for reading without blocking and returns it
// with its information, or an error wrapping ErrNotRegular when it is not
// a regular file. The caller closes the file. O_NONBLOCK has no effect on
// reads of a regular file.
func Open(path string, links Links) (*os.File, fs.FileInfo, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK
	if links == NoFollow {
		flags |= noFollow
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		if links == NoFollow && errors.Is(err, syscall.ELOOP) {
			return nil, nil, fmt.Errorf("%w: a symbolic link", ErrNotRegular)
		}
		return nil, nil, pathless.Error(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, pathless.Error(err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s", ErrNotRegular, kind(fi.Mode()))
	}
	return f, fi, nil
}

// Read reads the regular file at path (see Open) of at most limit bytes and
// returns its content and information. A larger file yields an error
// wrapping ErrTooLarge; no more than limit+1 bytes are read.
func Read(path string, limit int64, links Links) ([]byte, fs.FileInfo, error) {
	f, fi, err := Open(path, links)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, nil, pathless.Error(err)
	}
	if int64(len(b)) > limit {
		return nil, nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	return b, fi, nil
}

// kind names a file type that is not regular.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "of type " + m.Type().String()
}
