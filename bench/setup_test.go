package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
	"github.com/riffdb/riffdb/server"
	"github.com/riffdb/riffdb/statsapi"
)

// benchContract has a one-event command (the latency load) and a 16-event
// command, the most events a contract command may emit: the cheapest way to
// create many pending intents.
const benchContract = `
[commands.place_order]
input = { order_id = "string", amount_cents = "int", note = "string?" }
emits = ["order_placed"]

[commands.bulk]
input = { x = "int" }
emits = ["e01", "e02", "e03", "e04", "e05", "e06", "e07", "e08", "e09", "e10", "e11", "e12", "e13", "e14", "e15", "e16"]
`

// eventsPerBulk is the number of events one bulk command emits.
const eventsPerBulk = 16

// committers is the number of concurrent clients used to preload intents.
const committers = 64

// install is one server installation under a private b.TempDir: the
// embedded development configuration (listeners moved to 127.0.0.1:0, log
// level error) with benchContract and a token holding every permission.
type install struct {
	root  string
	cfg   *config.Config
	token string
}

// newInstall prepares an installation. ratio is the trace sample ratio;
// otlp, when not empty, is the OTLP/gRPC endpoint spans are exported to.
func newInstall(tb testing.TB, ratio float64, otlp string) *install {
	tb.Helper()
	root := filepath.Join(tb.TempDir(), "riffdb")
	if err := os.Mkdir(root, 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "contract.toml"), []byte(benchContract), 0o600); err != nil {
		tb.Fatal(err)
	}
	env := func(k string) string {
		if k == config.EnvTelemetryLogLevel {
			return "error"
		}
		return ""
	}
	cfg, token, err := server.DevSetup(root, env, config.Overrides{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", OTLPEndpoint: otlp})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Telemetry.TraceSampleRatio = ratio
	return &install{root: root, cfg: cfg, token: token}
}

// preload commits exactly events events straight into the installation's
// primary store with 64 concurrent committers, while no server runs (16-event
// bulk commands, then one-event commands for the remainder); the server
// opened afterwards finds them pending.
func (in *install) preload(tb testing.TB, events int) {
	tb.Helper()
	c, err := contract.Compile([]byte(benchContract))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	db, err := primary.Open(ctx, primary.Options{Path: in.cfg.Databases[0].Path, Contract: c})
	if err != nil {
		tb.Fatal(err)
	}
	bulk, commands := int64(events/eventsPerBulk), int64(events/eventsPerBulk+events%eventsPerBulk)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, committers)
	for range committers {
		wg.Go(func() {
			for i := next.Add(1); i <= commands; i = next.Add(1) {
				name, in := "bulk", fmt.Sprintf(`{"x":%d}`, i)
				if i > bulk {
					name, in = "place_order", fmt.Sprintf(`{"order_id":"p-%d","amount_cents":1}`, i)
				}
				if _, err := db.Execute(ctx, name, json.RawMessage(in), ""); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
}

// open opens a server on the installation (stores and listeners) without
// starting it.
func (in *install) open(tb testing.TB) *server.Server {
	tb.Helper()
	s, err := server.New(context.Background(), server.Options{Config: in.cfg, LogOutput: io.Discard})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// start opens and starts a server on the installation.
func (in *install) start(tb testing.TB) *server.Server {
	tb.Helper()
	s := in.open(tb)
	if err := s.Start(context.Background()); err != nil {
		_ = s.Stop(context.Background())
		tb.Fatal(err)
	}
	return s
}

// stop stops the server, failing the benchmark on an error. It first
// closes the client's idle connections: the server's Shutdown waits up to
// five seconds for a connection that was opened but never sent a request
// (the transport dials spares under concurrent load).
func stop(tb testing.TB, s *server.Server) {
	tb.Helper()
	client.CloseIdleConnections()
	if err := s.Stop(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// client is a keep-alive HTTP client for one server.
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}

// openLoopConns bounds openLoop's connections: the server keeps at most
// max_connections_per_peer API connections from one address (at least 32
// by default) and makes room for a new one by closing another that has not
// authenticated yet, so an open loop that opened a connection for each
// request in flight (up to 512 when the server falls behind) had requests
// fail with EOF. Requests beyond it wait in the client for a connection.
const openLoopConns = 32

var openLoopClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: openLoopConns, MaxConnsPerHost: openLoopConns},
	Timeout: 30 * time.Second}

// stats fetches GET /v1/stats (allStats) of a server with one database.
func stats(s *server.Server, token string) (statsapi.Stats, error) {
	st, err := allStats(s, token)
	if err != nil {
		return statsapi.Stats{}, err
	}
	if len(st.Databases) != 1 {
		return statsapi.Stats{}, fmt.Errorf("GET /v1/stats: %d databases", len(st.Databases))
	}
	return st, nil
}

// waitPending polls /v1/stats every interval until the pending count is
// known (the index is built) and satisfies done, or the deadline passes.
func waitPending(s *server.Server, token string, interval, deadline time.Duration, done func(uint64) bool) (uint64, error) {
	limit := time.Now().Add(deadline)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st, err := stats(s, token)
		if err != nil {
			return 0, err
		}
		d := st.Databases[0]
		if p := d.PendingOutboxDeliveries; p != nil && done(*p) {
			return *p, nil
		}
		if time.Now().After(limit) {
			return 0, fmt.Errorf("pending count did not settle within %s (health %s/%s)", deadline, d.Outbox.Health, d.Outbox.Reason)
		}
		<-t.C
	}
}

// commandWith sends one place_order command over HTTP through the client c.
func commandWith(c *http.Client, s *server.Server, token string, i int) error {
	body := fmt.Sprintf(`{"input":{"order_id":"o-%d","amount_cents":1250}}`, i)
	req, err := http.NewRequest(http.MethodPost, "http://"+s.APIAddr()+"/v1/databases/default/commands/place_order",
		stringsReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("command: %s", resp.Status)
	}
	return nil
}

// rawFdatasync appends 128 bytes and fdatasyncs n times in a file under
// dir, returning the elapsed time: the disk's floor for one durable writer.
func rawFdatasync(tb testing.TB, dir string, n int) time.Duration {
	tb.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "raw"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 128)
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(start)
}
