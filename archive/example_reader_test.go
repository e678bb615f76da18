//go:build linux

package archive_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
)

// ExampleOpenReader reconciles an archive in bounded sessions: each session
// opens the archive read-only, reads a few pages from the saved cursor,
// saves the next cursor (its text form) and closes, releasing the archive.
func ExampleOpenReader() {
	ctx := context.Background()
	base, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "outbox")
	_ = os.Mkdir(dir, 0o700)
	db, _ := event.ParseDatabaseID("00000000002a71018101010101010101")
	s, err := archive.Open(ctx, dir, archive.Options{Database: db, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	for seq := uint64(1); seq <= 600; seq++ {
		st, _ := event.NewStored(event.ID{Seq: seq}, "order_placed", []byte(`{"order_id":"A-1"}`))
		_, _ = s.Accept(ctx, event.Key{Database: db, Incarnation: 1, Event: st.ID}, st.Encode())
	}
	_ = s.Close() // the server stops; the campaign needs exclusive custody

	saved := ""     // the campaign's saved position (text form of a Cursor)
	var total int64 // records reconciled so far
	for session := 1; ; session++ {
		r, err := archive.OpenReader(ctx, dir, db)
		if err != nil {
			fmt.Println(err)
			return
		}
		var after archive.Cursor
		if err := after.UnmarshalText([]byte(saved)); err != nil {
			fmt.Println(err) // a damaged cursor, or one of another archive, is refused
			return
		}
		for pages := 0; pages < 2; pages++ { // this session's bound
			page, err := r.ReadPage(ctx, after)
			if err != nil {
				fmt.Println(err)
				return
			}
			total += int64(len(page.Records)) // compare page.Records with the campaign's source here
			if after = page.Next; after == nil {
				break
			}
		}
		text, _ := after.MarshalText()
		saved = string(text)
		_ = r.Close()
		fmt.Println("session", session, "reconciled", total, "done", saved == "")
		if saved == "" {
			return
		}
	}
	// Output:
	// session 1 reconciled 512 done false
	// session 2 reconciled 600 done true
}
