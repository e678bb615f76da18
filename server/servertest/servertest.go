// Package servertest starts a real riffdb server for other packages' tests:
// the embedded development configuration (a sample contract, an outbox
// archive) on ephemeral loopback ports, stopped when the test ends.
package servertest

import (
	"context"
	"io"
	"testing"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/server"
)

// StartDev sets up the development configuration under root, starts the
// server and returns it with a token holding every permission. The server
// is stopped by tb's cleanup.
func StartDev(tb testing.TB, root string) (*server.Server, string) {
	tb.Helper()
	cfg, token, err := server.DevSetup(root, nil, config.Overrides{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := server.New(context.Background(), server.Options{Config: cfg, LogOutput: io.Discard})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, token
}
