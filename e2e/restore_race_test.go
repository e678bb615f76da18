package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/store/dirlock/dirlocktest"
)

// acked is one acknowledged command: its idempotency key, input and commit
// sequence.
type acked struct {
	key   string
	input map[string]any
	seq   uint64
}

// commitAcked runs n commands with idempotency keys prefix-0… and returns
// the acknowledged ones; it stops at the first failure (a server that went
// away).
func commitAcked(p *proc, token, prefix string, from, n int) []acked {
	var acks []acked
	for i := from; i < from+n; i++ {
		in := orderInput(i)
		key := fmt.Sprintf("%s-%d", prefix, i)
		code, r, _, err := p.command(context.Background(), token, "place_order", in, key)
		if err != nil || code != http.StatusOK {
			break
		}
		acks = append(acks, acked{key: key, input: in, seq: r.CommitSequence})
	}
	return acks
}

// TestRestoreKeepsServersOut starts servers in a loop while a restore runs
// and checks that every command a server acknowledged is, afterwards, in the
// restored database or in the data the restore moved aside, and that both
// start. The replaced database holds a large file sorting after LOCK, so a
// restore that dropped its lock while checksumming the directory it replaces
// would let a server in for as long as that file takes to read (issue:
// a server started in that window acknowledged 3,000 commands into the store
// the restore then moved aside, and the restored database was refused as
// corrupt). With the lock kept, every start during the restore is refused
// with database_busy.
func TestRestoreKeepsServersOut(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a server in a loop during a restore")
	}
	e := newEnv(t, envOpts{})
	root := filepath.Join(e.root, "backups")
	must(t, os.Mkdir(root, 0o700))
	b, err := os.ReadFile(e.config)
	must(t, err)
	must(t, os.WriteFile(e.config, []byte(strings.Replace(string(b), "[database]\n",
		fmt.Sprintf("[database]\nbackup_root = %q\n", root), 1)), 0o600))
	token := e.token([]string{"execute_commands"}, "")
	backups := e.tokenFile("backups", e.token([]string{"manage_backups"}, "default"))

	p := e.start()
	acks := commitAcked(p, token, "before", 0, 100)
	bk := takeBackup(t, p, backups)
	acks = append(acks, commitAcked(p, token, "before", 100, 100)...)
	if len(acks) != 200 {
		t.Fatalf("%d of 200 commands acknowledged before the restore", len(acks))
	}
	p.stop()
	must(t, os.WriteFile(filepath.Join(e.dbPath, "zz-operator-notes"), bytes.Repeat([]byte{'x'}, 256<<20), 0o600))

	restore := exec.Command(binary, "--output", "json", "database", "restore", "--config", e.config,
		"--database", "default", "--backup", bk.Name)
	var rout, rerr bytes.Buffer
	restore.Stdout, restore.Stderr = &rout, &rerr
	must(t, restore.Start())
	done := make(chan error, 1)
	go func() { done <- restore.Wait() }()
	running := func() bool {
		select {
		case err := <-done:
			done <- err
			return false
		default:
			return true
		}
	}

	// Servers start only once the restore holds the database (a server
	// that started first would make the restore itself refuse).
	lock := filepath.Join(e.dbPath, "LOCK")
	for running() && dirlocktest.Free(t, lock) {
	}
	var attempts, busy, started int
	for i := 0; running(); i++ {
		attempts++
		sp, ready := e.spawn()
		select {
		case <-ready:
			started++
			sp.api = sp.readyAPI
			got := commitAcked(sp, token, fmt.Sprintf("during-%d", i), 0, 50)
			t.Logf("a server started during the restore and acknowledged %d commands", len(got))
			acks = append(acks, got...)
			sp.kill()
		case <-sp.exited:
			if strings.Contains(sp.stderr.String(), "held by another process") {
				busy++
			} else {
				t.Logf("a start during the restore ended otherwise: %s", sp.stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a server neither started nor refused within 60s")
		}
	}
	must(t, <-done)
	t.Logf("during the restore: %d starts, %d refused busy, %d started", attempts, busy, started)
	// A server may start between the restore's exit (which releases the
	// lock) and the test noticing it; what matters is where the commands it
	// acknowledged are, checked below.
	if busy == 0 {
		t.Fatal("no server start was refused beside the restore: the test proved nothing")
	}
	var res restoreResult
	var env cliResult
	must(t, json.Unmarshal(rout.Bytes(), &env))
	if !env.OK {
		t.Fatalf("restore: %s %s", rout.String(), rerr.String())
	}
	must(t, json.Unmarshal(env.Result, &res))

	// Each acknowledged command is in the restored database (a replay with
	// its key answers its commit) or else in the moved-aside data. A replay
	// that is not a replay commits the command anew, which the check of the
	// other database does not see.
	missing := presentIn(t, e, token, acks)
	if len(missing) > len(acks)-100 {
		t.Errorf("the restored database holds %d of the %d commands acknowledged before its backup", len(acks)-len(missing), 100)
	}
	e.restore(res.ReplacedAs) // undo: the moved-aside data back at the path
	if lost := presentIn(t, e, token, missing); len(lost) != 0 {
		t.Fatalf("%d acknowledged commands are in neither database, e.g. %s", len(lost), lost[0].key)
	}
}

// presentIn starts the server on e's database and returns the acks it does
// not hold under their commit sequences.
func presentIn(t *testing.T, e *env, token string, acks []acked) []acked {
	t.Helper()
	p := e.start()
	defer p.stop()
	var missing []acked
	for _, a := range acks {
		code, r, body, err := p.command(context.Background(), token, "place_order", a.input, a.key)
		if err != nil || code != http.StatusOK {
			t.Fatalf("replay of %s: %d %v %s", a.key, code, err, body)
		}
		if !r.Replayed || r.CommitSequence != a.seq {
			missing = append(missing, a)
		}
	}
	return missing
}
