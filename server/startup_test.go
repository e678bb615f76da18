package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
)

// startupConfig returns a one-database configuration under a fresh root
// whose listeners are those given.
func startupConfig(t *testing.T, listen, metricsListen string) (*config.Config, string) {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "contract.toml"), []byte(statsContract), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[server]
listen = %q
metrics_listen = %q
credential_path = %q
[database]
path = %q
contract = %q
`, listen, metricsListen, root+"/creds", root+"/db", root+"/contract.toml")), nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, root
}

// TestNewBusyListenerFailsCleanly starts a server whose API or metrics
// address is taken: New returns a classified error naming the option (no
// panic, no path) and closes what it opened, so that a second New in the
// same process opens the same stores once the address is free.
func TestNewBusyListenerFailsCleanly(t *testing.T) {
	for _, option := range []string{"server.listen", "server.metrics_listen"} {
		t.Run(option, func(t *testing.T) {
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			listen, metricsListen := busy.Addr().String(), "127.0.0.1:0"
			if option == "server.metrics_listen" {
				listen, metricsListen = metricsListen, listen
			}
			cfg, root := startupConfig(t, listen, metricsListen)
			ctx := context.Background()

			s, err := New(ctx, Options{Config: cfg, LogOutput: io.Discard})
			if err == nil {
				_ = s.Stop(ctx)
				t.Fatal("New succeeded on a busy address")
			}
			if s != nil {
				t.Errorf("New returned a server with its error")
			}
			var se *StartupError
			if !errors.As(err, &se) || !errors.Is(err, ErrListen) {
				t.Fatalf("got %T %v, want a *StartupError matching ErrListen", err, err)
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("the cause is lost: %v", err)
			}
			for _, other := range []error{ErrContract, ErrCredentials, ErrDatabase} {
				if errors.Is(err, other) {
					t.Errorf("%v also matches %v", err, other)
				}
			}
			if msg := err.Error(); !strings.HasPrefix(msg, option+":") || strings.Contains(msg, root) {
				t.Errorf("message %q: want it to start with %s and name no path", msg, option)
			}

			// Nothing is left open or locked: the same stores open again in
			// this process (Pebble refuses a store whose lock this process
			// still holds).
			if err := busy.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = New(ctx, Options{Config: cfg, LogOutput: io.Discard})
			if err != nil {
				t.Fatalf("New after the address was freed: %v", err)
			}
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNewDatabaseFailureClosesEarlierDatabases makes the second of two
// databases unopenable (a file where its directory should be): the first,
// already open, is closed again, so that both open once the cause is gone.
func TestNewDatabaseFailureClosesEarlierDatabases(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/contract.toml", []byte(statsContract), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/b", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
[databases.a]
path = %q
contract = %q
[databases.b]
path = %q
contract = %q
`, root+"/creds", root+"/a", root+"/contract.toml", root+"/b", root+"/contract.toml")), nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = New(ctx, Options{Config: cfg, LogOutput: io.Discard})
	if !errors.Is(err, ErrDatabase) {
		t.Fatalf("got %v, want ErrDatabase", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `database "b"`) || strings.Contains(msg, root) {
		t.Errorf("message %q: want it to name database \"b\" and no path", msg)
	}
	if err := os.Remove(root + "/b"); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, Options{Config: cfg, LogOutput: io.Discard})
	if err != nil {
		t.Fatalf("New after the cause was removed: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestScrubRemovesPaths(t *testing.T) {
	cfg, root := startupConfig(t, "127.0.0.1:0", "127.0.0.1:0")
	pe := &fs.PathError{Op: "open", Path: "/elsewhere/x", Err: syscall.ENOENT}
	le := &os.LinkError{Op: "rename", Old: "/elsewhere/a", New: "/elsewhere/b", Err: syscall.EXDEV}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{pe, "open: no such file or directory"},
		{fmt.Errorf("reading: %w", pe), "reading: open: no such file or directory"},
		{errors.Join(pe, fmt.Errorf("moving: %w", le)), "open: no such file or directory; moving: rename: invalid cross-device link"},
		{fmt.Errorf("a: %w (then b: %w)", pe, le), "a: open: no such file or directory (then b: rename: invalid cross-device link)"},
		{os.NewSyscallError("fsync", syscall.EIO), "fsync: input/output error"},
		{fmt.Errorf("pebble: database %q is odd", root+"/db"), `pebble: database "<path of database "default">" is odd`},
	} {
		if got := scrub(cfg, tc.err); got != tc.want {
			t.Errorf("scrub(%q)\n got %q\nwant %q", tc.err, got, tc.want)
		}
	}
}

// TestUnprotectedDatabaseDirectoryIsRefused: a database directory that its
// group or others may reach stops startup with its own class, naming the
// database and no path, and nothing is created in it.
func TestUnprotectedDatabaseDirectoryIsRefused(t *testing.T) {
	cfg, root := startupConfig(t, "127.0.0.1:0", "127.0.0.1:0")
	if err := os.Mkdir(root+"/db", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root+"/db", 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), Options{Config: cfg, LogOutput: io.Discard})
	if !errors.Is(err, ErrDatabase) || !errors.Is(err, primary.ErrUnprotected) {
		t.Fatalf("got %v, want ErrDatabase and primary.ErrUnprotected", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `database "default"`) || !strings.Contains(msg, "chmod 700") || strings.Contains(msg, root) {
		t.Errorf("message %q: want the database named, the fix, and no path", msg)
	}
	if entries, _ := os.ReadDir(root + "/db"); len(entries) != 0 {
		t.Errorf("the refused directory holds %d entries", len(entries))
	}
}
