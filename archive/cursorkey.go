package archive

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// The cursor key: why an edited step cursor cannot stand in for a scan.
//
// A step cursor of Inspect carries the running totals and the position of
// a scan (inspectcursor.go); the step that completes the scan compares the
// totals with the accounting. A checksum would let anyone who can run a
// tool rewrite the totals and the position to the end of the keyspace and
// get `verified` after one page. The cursor is therefore authenticated
// with HMAC-SHA256 under a secret that only the archive's custody gives:
// CursorKeyFileName, 32 random bytes in the store directory (0700, the
// file 0600, read under the same custody checks as Pebble's files). A
// cursor edited by hand or by a tool, whatever its checksum, is
// ErrInvalidCursor.
//
// The key is written when the store is created and, for an archive created
// before the key existed (or whose key file was deleted), by the next
// read-write Open that accepts the archive, after every check of the store
// passed (a refused archive is left as it is), with a warning. The key is
// not evidence of anything the archive holds: a new one only makes the
// cursors issued under the old one invalid (start the scan again), and no
// cursor can be made valid without reading the file. A key file that
// exists but does not decode (truncated, zeroed, a flipped byte) is damage:
// Open and Inspect refuse it as corrupt and never replace it. Inspect never
// writes the key: without one it verifies an archive in one step, and
// refuses (ErrRefused) to issue or accept a cursor.
//
// The key itself never appears in an error, a log line or a cursor.

// CursorKeyFileName is riffdb's own file in the store directory: the secret
// that authenticates Inspect's step cursors.
const CursorKeyFileName = "riffdb-cursor-key"

const (
	cursorKeyMagic = "RIFFCKY1"
	cursorKeyLen   = 32
	cursorKeySize  = len(cursorKeyMagic) + cursorKeyLen + 4
	// cursorMACLen is the length of a step cursor's authenticator.
	cursorMACLen = sha256.Size
)

// cursorKey is the secret of CursorKeyFileName.
type cursorKey struct{ b [cursorKeyLen]byte }

// errCursorKeyDamaged is the error for a key file that does not decode.
var errCursorKeyDamaged = newError(ErrCorrupt, "the archive's cursor key file is damaged", nil)

// errNoCursorKey is Inspect's error for a store without a key file.
var errNoCursorKey = newError(ErrRefused, "the archive has no cursor key file, and a read-only inspection never "+
	"creates one, so a scan of more than one step can neither be resumed nor continued (the server writes the "+
	"file when it next opens the archive; or inspect the archive in one step with a larger --max-pages)", nil)

func newCursorKey() (cursorKey, error) {
	var k cursorKey
	if _, err := io.ReadFull(rand.Reader, k.b[:]); err != nil {
		return k, newError(ErrUnavailable, "creating the archive's cursor key", nil)
	}
	return k, nil
}

func encodeCursorKey(k cursorKey) []byte {
	b := make([]byte, 0, cursorKeySize)
	b = append(b, cursorKeyMagic...)
	b = append(b, k.b[:]...)
	return binary.BigEndian.AppendUint32(b, checksum(b))
}

func decodeCursorKey(b []byte) (cursorKey, error) {
	var k cursorKey
	if len(b) != cursorKeySize || string(b[:len(cursorKeyMagic)]) != cursorKeyMagic ||
		checksum(b[:cursorKeySize-4]) != binary.BigEndian.Uint32(b[cursorKeySize-4:]) {
		return k, errCursorKeyDamaged
	}
	copy(k.b[:], b[len(cursorKeyMagic):])
	return k, nil
}

// readCursorKey reads the key file (readOwnFile); ok is false when there
// is none. Errors carry none of the file's bytes.
func readCursorKey(fs vfs.FS, storeDir string) (k cursorKey, ok bool, err error) {
	b, ok, err := readOwnFile(fs, storeDir, CursorKeyFileName, cursorKeySize, "reading the archive's cursor key file")
	if err != nil || !ok {
		return k, false, err
	}
	k, err = decodeCursorKey(b)
	return k, err == nil, err
}

// ensureCursorKey checks the key file of an open store that passed every
// check, and writes a new key when there is none (created: the store was
// created by this open; otherwise the missing file is logged). A damaged
// key file is ErrCorrupt and is left as it is.
func (s *Store) ensureCursorKey(created bool) error {
	_, ok, err := readCursorKey(s.fs, s.storeDir)
	if err != nil || ok {
		return err
	}
	k, err := newCursorKey()
	if err != nil {
		return err
	}
	if !created {
		s.log.Warn("the archive had no cursor key file (an archive created by an older riffdb, or the file was removed); "+
			"writing a new key: cursors of inspections issued before are no longer accepted",
			zap.String("file", CursorKeyFileName))
	}
	return mapError("writing the archive's cursor key file", dirsync.WriteFile(s.fs, s.storeDir, CursorKeyFileName, encodeCursorKey(k)))
}

// mac returns the authenticator of a step cursor's body.
func (k cursorKey) mac(body []byte) []byte {
	h := hmac.New(sha256.New, k.b[:])
	h.Write(body)
	return h.Sum(nil)
}
