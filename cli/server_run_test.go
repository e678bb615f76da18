package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/cli"
)

// TestServerRunStartupFailures runs `server run` in process on installations
// that cannot start and checks the envelope: kind local, exit 2, the class's
// code, no path, no panic.
func TestServerRunStartupFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, root string) []string // returns extra flags
		code   string
		says   string
	}{
		{"listen busy", func(t *testing.T, _ string) []string {
			return []string{"--listen", busyAddr(t)}
		}, "listen_unavailable", "server.listen"},
		{"metrics busy", func(t *testing.T, _ string) []string {
			return []string{"--metrics-listen", busyAddr(t)}
		}, "listen_unavailable", "server.metrics_listen"},
		{"contract missing", func(t *testing.T, root string) []string {
			mustDo(t, os.Remove(filepath.Join(root, "contract.toml")))
			return nil
		}, "contract_invalid", `database "default": the contract`},
		{"credentials not private", func(t *testing.T, root string) []string {
			mustDo(t, os.Mkdir(filepath.Join(root, "creds"), 0o755))
			mustDo(t, os.Chmod(filepath.Join(root, "creds"), 0o755))
			return nil
		}, "credentials_refused", "server.credential_path"},
		{"database unopenable", func(t *testing.T, root string) []string {
			mustDo(t, os.WriteFile(filepath.Join(root, "db"), nil, 0o600))
			return nil
		}, "database_unavailable", `database "default": the primary store cannot be opened`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mustDo(t, os.Chmod(root, 0o700))
			mustDo(t, os.WriteFile(filepath.Join(root, "contract.toml"),
				[]byte("[commands.put]\ninput = { k = \"string\" }\nemits = [\"put\"]\n"), 0o600))
			config := filepath.Join(root, "riffdb.toml")
			mustDo(t, os.WriteFile(config, []byte(fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
[database]
path = %q
contract = %q
`, filepath.Join(root, "creds"), filepath.Join(root, "db"), filepath.Join(root, "contract.toml"))), 0o600))
			args := append([]string{"--output", "json", "server", "run", "--config", config}, tc.damage(t, root)...)
			var stdout, stderr bytes.Buffer
			code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
			if code != cli.ExitLocal {
				t.Errorf("exit %d, want %d", code, cli.ExitLocal)
			}
			var env struct {
				OK    bool `json:"ok"`
				Error struct {
					Kind, Code, Message string
				} `json:"error"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
				t.Fatalf("no envelope: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			if env.OK || env.Error.Kind != "local" || env.Error.Code != tc.code {
				t.Errorf("got %+v, want kind local, code %s", env, tc.code)
			}
			if !strings.Contains(env.Error.Message, tc.says) || strings.Contains(env.Error.Message, root) {
				t.Errorf("message %q: want it to say %q and name no path", env.Error.Message, tc.says)
			}
			if s := stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
				t.Errorf("stderr shows a panic:\n%s", s)
			}
		})
	}
}

// busyAddr returns an address that is taken until the test ends.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustDo(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
