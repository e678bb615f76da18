package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startupRefused runs `riffdb --output json server run --config` on e's
// installation and checks that the server refuses to start the way the CLI
// contract says: exit 2, one envelope with kind local and the given code, a
// message that contains says and no path under e's root, and no panic.
func startupRefused(t *testing.T, e *env, code, says string) {
	t.Helper()
	startupRefusedWithin(t, e, 60*time.Second, code, says)
}

// startupRefusedWithin is startupRefused with the bound on how long the
// refusal may take.
func startupRefusedWithin(t *testing.T, e *env, bound time.Duration, code, says string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--output", "json", "server", "run", "--config", e.config)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("server run did not refuse within %s\nstderr: %s", bound, stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("server run ended with %v, want exit status 2", err)
	}
	if s := stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
		t.Errorf("stderr shows a panic:\n%s", s)
	}
	t.Logf("envelope: %s", bytes.TrimSpace(stdout.Bytes()))
	var r cliResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("no envelope: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if r.Schema != "riffdb.cli.output/v1" || r.Command != "server.run" || r.OK || r.Error == nil {
		t.Fatalf("envelope %s, want a server.run failure", stdout.String())
	}
	if r.Error.Kind != "local" || r.Error.Code != code {
		t.Errorf("error kind %q code %q, want local %q (message %q)", r.Error.Kind, r.Error.Code, code, r.Error.Message)
	}
	if !strings.Contains(r.Error.Message, says) {
		t.Errorf("message %q does not say %q", r.Error.Message, says)
	}
	if strings.Contains(r.Error.Message, e.root) {
		t.Errorf("message %q names a path", r.Error.Message)
	}
}

// startupRewrite replaces old by new in e's configuration file.
func startupRewrite(t *testing.T, e *env, old, new string) {
	t.Helper()
	b, err := os.ReadFile(e.config)
	must(t, err)
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("configuration has no %q", old)
	}
	must(t, os.WriteFile(e.config, bytes.Replace(b, []byte(old), []byte(new), 1), 0o600))
}

// TestStartupListenBusy takes the API or the metrics address before the
// server starts: it refuses with listen_unavailable naming the option, and
// starts on the same address once it is free.
func TestStartupListenBusy(t *testing.T) {
	for _, option := range []string{"listen", "metrics_listen"} {
		t.Run(option, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			must(t, err)
			defer busy.Close()
			startupRewrite(t, e, "\n"+option+` = "127.0.0.1:0"`, "\n"+option+` = "`+busy.Addr().String()+`"`)
			startupRefused(t, e, "listen_unavailable", "server."+option)

			must(t, busy.Close())
			p := e.start()
			if got := map[string]string{"listen": p.api, "metrics_listen": p.metrics}[option]; got != busy.Addr().String() {
				t.Errorf("server %s on %s, want %s", option, got, busy.Addr())
			}
			p.stop()
		})
	}
}

// TestStartupContract removes the contract file or makes it invalid: the
// server refuses with contract_invalid naming the database and the role,
// and starts once the contract is restored.
func TestStartupContract(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"missing", os.Remove},
		{"invalid", func(path string) error {
			return os.WriteFile(path, []byte("[commands.place_order]\ninput = { order_id = \"uuid\" }\n"), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			path := filepath.Join(e.root, "contract.toml")
			must(t, tc.damage(path))
			startupRefused(t, e, "contract_invalid", `database "default": the contract`)

			must(t, os.WriteFile(path, []byte(testContract), 0o600))
			e.start().stop()
		})
	}
}

// TestStartupCredentialsNotPrivate gives the credential directory mode 0755:
// the server refuses with credentials_refused, and starts once the mode is
// 0700.
func TestStartupCredentialsNotPrivate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	dir := filepath.Join(e.root, "credentials")
	must(t, os.Mkdir(dir, 0o700))
	must(t, os.Chmod(dir, 0o755))
	startupRefused(t, e, "credentials_refused", "server.credential_path")

	must(t, os.Chmod(dir, 0o700))
	e.start().stop()
}

// TestStartupDatabaseUnopenable puts a file where the database directory
// should be (unopenable even for root): the server refuses with
// database_unavailable, and starts once the file is gone.
func TestStartupDatabaseUnopenable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	must(t, os.WriteFile(e.dbPath, []byte("not a database"), 0o600))
	startupRefused(t, e, "database_unavailable", `database "default": the primary store cannot be opened`)

	must(t, os.Remove(e.dbPath))
	e.start().stop()
}

// TestStartupSecondServerOnSameData starts a second server on a running
// server's installation: it refuses with database_busy, and the first keeps
// serving commands and restarts cleanly afterwards.
func TestStartupSecondServerOnSameData(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands"}, "default")
	p := e.start()
	ctx := context.Background()
	order := func(p *proc, key string) {
		t.Helper()
		code, _, body, err := p.command(ctx, token, "place_order", map[string]any{"order_id": key, "amount_cents": 1}, key)
		if err != nil || code != http.StatusOK {
			t.Fatalf("place_order %s: %d %v %s", key, code, err, body)
		}
	}
	order(p, "before")

	startupRefused(t, e, "database_busy", `database "default": the primary store is held by another process`)

	order(p, "after")
	p.stop()
	p = e.start()
	order(p, "restarted")
	p.stop()
}

// TestStartupDatabaseUnprotected gives the database directory mode 0755:
// the server refuses with database_unprotected, writes nothing into it,
// and starts once the mode is 0700.
func TestStartupDatabaseUnprotected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	must(t, os.Mkdir(e.dbPath, 0o700))
	must(t, os.Chmod(e.dbPath, 0o755))
	startupRefused(t, e, "database_unprotected", `database "default": the database path is accessible to other users`)
	if entries, _ := os.ReadDir(e.dbPath); len(entries) != 0 {
		t.Fatalf("the refused directory holds %d entries", len(entries))
	}
	must(t, os.Chmod(e.dbPath, 0o700))
	e.start().stop()
}

// TestStartupTLSAndPlaintext: a TLS key readable by others is refused
// with tls_refused; a non-loopback listen without TLS is refused with
// invalid_config unless allow_insecure_listen is set.
func TestStartupTLSAndPlaintext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	key := filepath.Join(e.root, "key.pem")
	cert := filepath.Join(e.root, "cert.pem")
	must(t, os.WriteFile(cert, []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o644))
	must(t, os.WriteFile(key, []byte("-----BEGIN EC PRIVATE KEY-----\n-----END EC PRIVATE KEY-----\n"), 0o644))
	startupRewrite(t, e, "[server]\n", "[server]\ntls_cert_path = \""+cert+"\"\ntls_key_path = \""+key+"\"\n")
	startupRefused(t, e, "tls_refused", "server.tls_key_path: the private key may be read by its group or others")

	e = newEnv(t, envOpts{})
	startupRewrite(t, e, "\nlisten = \"127.0.0.1:0\"", "\nlisten = \"0.0.0.0:0\"")
	startupRefused(t, e, "invalid_config", "server.listen is not a loopback address and TLS is not configured")
	startupRewrite(t, e, "[server]\n", "[server]\nallow_insecure_listen = true\n")
	e.start().stop()
}
