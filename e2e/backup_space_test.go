package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupsStopAtTheReserve is the reproduction turned around: a
// database-scoped manage_backups token takes backups, back to back, of a
// growing database whose store and backup_root share a 64 MiB filesystem.
// Retention keeps at most backup_keep = 3 of them; once the next backup
// would leave less than backup_reserve_bytes free, it is refused (the
// CLI's public error backup_insufficient_space, exit 1, from the server's
// 507) without leaving anything behind, and the primary keeps committing
// and answering stats on the same filesystem.
func TestBackupsStopAtTheReserve(t *testing.T) {
	const (
		keep    = 3
		reserve = 16 << 20
	)
	e := newEnv(t, envOpts{})
	mnt := filepath.Join(e.root, "smallfs")
	must(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("needs to mount a 64 MiB tmpfs (root and mount(8)): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	root := filepath.Join(mnt, "backups")
	must(t, os.Mkdir(root, 0o700))
	b, err := os.ReadFile(e.config)
	must(t, err)
	cfg := strings.Replace(string(b), fmt.Sprintf("path = %q\n", e.dbPath), fmt.Sprintf(
		"path = %q\nbackup_root = %q\nbackup_keep = %d\nbackup_reserve_bytes = %d\nbackup_min_interval = \"0s\"\n",
		filepath.Join(mnt, "db"), root, keep, reserve), 1)
	must(t, os.WriteFile(e.config, []byte(cfg), 0o600))
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	backups := e.tokenFile("backups", e.token([]string{"manage_backups"}, "default"))
	p := e.start()

	// Each round adds about 1 MiB of incompressible payload to the store.
	seq := 0
	grow := func(n, size int) {
		t.Helper()
		pad := make([]byte, size*3/4)
		for range n {
			_, _ = rand.Read(pad)
			seq++
			code, _, body, err := p.command(context.Background(), token, "place_order",
				map[string]any{"order_id": fmt.Sprint(seq), "amount_cents": seq, "note": base64.StdEncoding.EncodeToString(pad)}, "")
			if err != nil || code != http.StatusOK {
				t.Fatalf("command %d: %d %v %s", seq, code, err, body)
			}
		}
	}
	var refused cliResult
	taken := 0
	for round := 1; ; round++ {
		if round > 30 {
			t.Fatal("30 rounds of backups fit on a 64 MiB filesystem with a 16 MiB reserve")
		}
		grow(4, 256<<10)
		r := backupCLI(t, p, backups)
		if !r.OK {
			refused = r
			t.Logf("round %d refused: %+v", round, r.Error)
			break
		}
		taken++
		if n := len(listBackups(t, p, backups)); n != min(taken, keep) {
			t.Fatalf("round %d: %d backups kept, want %d (backup_keep is %d)", round, n, min(taken, keep), keep)
		}
	}
	if taken <= keep {
		t.Fatalf("only %d backups were taken before the refusal: retention was not exercised", taken)
	}
	if refused.Exit != 1 || refused.Error == nil || refused.Error.Kind != "public" || refused.Error.Code != "backup_insufficient_space" ||
		!strings.Contains(refused.Error.Message, "reserve of 16777216 bytes") || strings.Contains(refused.Error.Message, mnt) {
		t.Fatalf("the refusal: exit %d %+v", refused.Exit, refused.Error)
	}
	entries, err := os.ReadDir(root)
	must(t, err)
	if len(entries) != keep {
		t.Fatalf("backup_root holds %d entries after the refusal, want %d", len(entries), keep)
	}
	for _, en := range entries {
		if strings.HasSuffix(en.Name(), ".partial") {
			t.Fatalf("the refused backup left %s", en.Name())
		}
	}
	// The primary, on the same filesystem, keeps serving.
	grow(4, 64<<10)
	if s := p.stats(token); len(s.Databases) != 1 || s.Databases[0].LastCommitSequence != uint64(seq) {
		t.Fatalf("stats after the refusal: %+v, want last commit %d", s, seq)
	}
	if strings.Contains(p.stderr.String(), "no space left") {
		t.Fatalf("the server hit ENOSPC:\n%s", p.stderr.String())
	}
}
