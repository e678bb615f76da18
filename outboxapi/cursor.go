package outboxapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"

	"github.com/riffdb/riffdb/event"
)

// The listing's cursor: the position after which the next page starts,
// bound to the database and its history incarnation, and authenticated.
//
// Layout: 'D' ‖ version(1) ‖ database id(16) ‖ history incarnation(8) ‖
// last event id (seq 8, pos 4) ‖ HMAC-SHA256 of everything before it under
// the API's key. The key is 32 random bytes drawn when the server starts
// and never written anywhere: a cursor edited by hand (a checksum would
// only catch accidents) or issued by another server process does not
// verify, and is refused (invalid_cursor). A cursor issued for another
// database or another history incarnation of this one (a restore) verifies
// but is refused for that reason (cursor_other_database,
// cursor_other_incarnation). A refused cursor costs the operator one
// thing: listing again from the start.
const (
	cursorTag     = 'D'
	cursorVersion = 1
	cursorLen     = 2 + 16 + 8 + event.IDLen + sha256.Size
)

// position is what a cursor carries.
type position struct {
	db          event.DatabaseID
	incarnation uint64
	last        event.ID
}

// cursorError is why a cursor was refused: an error code and a message,
// neither of which repeats the cursor.
type cursorError struct{ code, msg string }

func (e *cursorError) Error() string { return e.msg }

func (a *API) encodeCursor(p position) string {
	b := make([]byte, 0, cursorLen)
	b = append(b, cursorTag, cursorVersion)
	b = append(b, p.db[:]...)
	b = binary.BigEndian.AppendUint64(b, p.incarnation)
	b = p.last.AppendBinary(b)
	b = append(b, a.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (a *API) mac(body []byte) []byte {
	h := hmac.New(sha256.New, a.key[:])
	h.Write(body)
	return h.Sum(nil)
}

// decodeCursor checks a cursor against the database it is used on.
func (a *API) decodeCursor(text string, db event.DatabaseID, incarnation uint64) (event.ID, error) {
	damaged := &cursorError{"invalid_cursor", "the cursor is damaged or truncated: pass the next_cursor of the previous page exactly, or list from the start"}
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || len(b) != cursorLen || b[0] != cursorTag {
		return event.ID{}, damaged
	}
	if b[1] != cursorVersion {
		return event.ID{}, &cursorError{"invalid_cursor", "the cursor's version is not one this server issues; list from the start"}
	}
	body := b[:len(b)-sha256.Size]
	if !hmac.Equal(b[len(body):], a.mac(body)) {
		return event.ID{}, &cursorError{"invalid_cursor", "the cursor was not issued by this server process as it is " +
			"(edited or damaged, or issued before the server restarted); list from the start"}
	}
	var p position
	copy(p.db[:], body[2:18])
	p.incarnation = binary.BigEndian.Uint64(body[18:26])
	if p.last, err = event.DecodeID(body[26:]); err != nil {
		return event.ID{}, damaged
	}
	if p.db != db {
		return event.ID{}, &cursorError{"cursor_other_database", "the cursor was issued for another database; list this one from the start"}
	}
	if p.incarnation != incarnation {
		return event.ID{}, &cursorError{"cursor_other_incarnation",
			"the cursor was issued for another history incarnation of this database (it was restored since); list from the start"}
	}
	return p.last, nil
}
