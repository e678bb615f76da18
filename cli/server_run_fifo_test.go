package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/cli"
)

// TestServerRunRefusesFIFOsAtOnce: a FIFO as the TLS key or as the contract
// file (no writer: a blocking open would wait for ever) is refused at once
// with the class's code (tls_refused, contract_invalid) and no path.
func TestServerRunRefusesFIFOsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, fifo, code, says string
	}{
		{"TLS key", "key.pem", "tls_refused", "server.tls_key_path: not a regular file"},
		{"contract", "contract.toml", "contract_invalid", `database "default": the contract file cannot be read`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mustDo(t, os.Chmod(root, 0o700))
			for _, name := range []string{"contract.toml", "cert.pem", "key.pem"} {
				if name == tc.fifo {
					continue
				}
				mustDo(t, os.WriteFile(filepath.Join(root, name),
					[]byte("[commands.put]\ninput = { k = \"string\" }\nemits = [\"put\"]\n"), 0o600))
			}
			fifo := filepath.Join(root, tc.fifo)
			mustDo(t, syscall.Mkfifo(fifo, 0o600))
			t.Cleanup(func() { // releases a reader blocked on the FIFO
				if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			})
			config := filepath.Join(root, "riffdb.toml")
			mustDo(t, os.WriteFile(config, []byte(fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
tls_cert_path = %q
tls_key_path = %q
[database]
path = %q
contract = %q
`, filepath.Join(root, "creds"), filepath.Join(root, "cert.pem"), filepath.Join(root, "key.pem"),
				filepath.Join(root, "db"), filepath.Join(root, "contract.toml"))), 0o600))
			var stdout, stderr bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- cli.Main([]string{"--output", "json", "server", "run", "--config", config},
					strings.NewReader(""), &stdout, &stderr)
			}()
			var code int
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("server run blocked on a FIFO")
			}
			if code != cli.ExitLocal {
				t.Errorf("exit %d, want %d", code, cli.ExitLocal)
			}
			var env struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
				t.Fatalf("no envelope: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			if env.Error.Code != tc.code || !strings.Contains(env.Error.Message, tc.says) || strings.Contains(env.Error.Message, root) {
				t.Errorf("got %+v, want code %s saying %q and no path", env.Error, tc.code, tc.says)
			}
		})
	}
}
