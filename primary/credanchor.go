package primary

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// The credential anchor.
//
// The credential store (package capability) counts its writes: every write
// stores a generation one higher than the file it replaces. An older copy of
// the credential directory put back is authentic, so only a record kept
// elsewhere tells it apart: credentialAnchorName, a small file in each
// database directory, next to the creation marker, holding the highest
// generation the store had when it was last written or opened. Putting an
// old credential directory back does not put back these files, so a server
// (or a capability command) finds the store below its anchor and refuses it.
//
// It is a file, not a key in the Pebble store, because the offline
// capability commands write it too, while the server is stopped and without
// opening the store (which would replay its log, and which a running server
// holds locked). It is written only into a database riffdb created (one with
// the creation marker): a directory without the marker is a database not
// created yet, and anything in it would be taken for leftovers of an
// interrupted creation. A database restored from a backup has no anchor until
// the next write or start records it (the backup does not copy it).
const credentialAnchorName = "riffdb-credentials"

const (
	credAnchorMagic = "RIFFCAN1"
	credAnchorSize  = len(credAnchorMagic) + 8 + 8 + 4
)

// CredentialAnchor is the record of the credential anchor file.
type CredentialAnchor struct {
	// Generation is the highest credential-store generation recorded.
	Generation uint64
	// AcceptedFrom, when not 0, is the generation that was recorded before
	// an operator accepted a restored store at Generation.
	AcceptedFrom uint64
}

var errCredAnchorDamaged = fmt.Errorf("%w: the database's credential anchor (%s) is damaged; "+
	"remove that file and start again (the next start records the credential store's generation again)", ErrCorrupt, credentialAnchorName)

func (a CredentialAnchor) encode() []byte {
	b := make([]byte, 0, credAnchorSize)
	b = append(b, credAnchorMagic...)
	b = binary.BigEndian.AppendUint64(b, a.Generation)
	b = binary.BigEndian.AppendUint64(b, a.AcceptedFrom)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeCredentialAnchor(b []byte) (CredentialAnchor, error) {
	if len(b) != credAnchorSize || string(b[:len(credAnchorMagic)]) != credAnchorMagic ||
		crc32.Checksum(b[:credAnchorSize-4], castagnoli) != binary.BigEndian.Uint32(b[credAnchorSize-4:]) {
		return CredentialAnchor{}, errCredAnchorDamaged
	}
	b = b[len(credAnchorMagic):]
	return CredentialAnchor{Generation: binary.BigEndian.Uint64(b), AcceptedFrom: binary.BigEndian.Uint64(b[8:])}, nil
}

// ReadCredentialAnchor reads the credential anchor of the database in dir.
// A database not created yet (dir missing or not a directory), or one
// without an anchor, reads as the zero value. It does not take the database's lock: the file is replaced
// atomically, and a running server may hold the lock. Errors wrap ErrCorrupt
// for a damaged file and name no path.
func ReadCredentialAnchor(dir string) (CredentialAnchor, error) {
	f, err := os.Open(filepath.Join(dir, credentialAnchorName))
	if notCreated(err) {
		return CredentialAnchor{}, nil
	}
	if err != nil {
		return CredentialAnchor{}, fmt.Errorf("primary: read the credential anchor: %w", pathless.Error(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(credAnchorSize)+1))
	if err != nil {
		return CredentialAnchor{}, fmt.Errorf("primary: read the credential anchor: %w", pathless.Error(err))
	}
	return decodeCredentialAnchor(b)
}

// WriteCredentialAnchor replaces the credential anchor of the database in
// dir with a, atomically and durably, and reports whether it did: a
// database not created yet (no directory, or no creation marker) gets none.
// Callers serialize writers (the credential store's lock). Errors name no
// path.
func WriteCredentialAnchor(dir string, a CredentialAnchor) (bool, error) {
	_, err := os.Lstat(filepath.Join(dir, createdMarkerName))
	switch {
	case notCreated(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("primary: examine the database directory: %w", pathless.Error(err))
	}
	if err := dirsync.WriteFile(vfs.Default, dir, credentialAnchorName, a.encode()); err != nil {
		return false, fmt.Errorf("primary: write the credential anchor: %w", pathless.Error(err))
	}
	return true, nil
}

// notCreated reports whether err, from a file in a database directory, shows
// that there is no database there yet: no such file, or the database path
// is not a directory (which the primary's Open reports as it should).
func notCreated(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
