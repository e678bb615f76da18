package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestServerFailedHoldsNoPathOrStack stops a running server with a real
// Pebble error that names the database directory and carries a stack (its
// %+v form, which zap.Error logs as errorVerbose). Neither the error Run
// returns — the server_failed envelope's message — nor the log names the
// directory or shows a stack frame. Before, the log line had both.
func TestServerFailedHoldsNoPathOrStack(t *testing.T) {
	cfg, root := startupConfig(t, "127.0.0.1:0", "127.0.0.1:0")
	dir := filepath.Join(root, "elsewhere")
	_, perr := pebble.Open(dir, &pebble.Options{ErrorIfNotExists: true})
	if perr == nil || !strings.Contains(fmt.Sprintf("%+v", perr), ".go:") {
		t.Fatalf("want a Pebble error with a stack, got %v", perr)
	}
	var logs testutil.SyncBuffer
	err := Run(context.Background(), Options{Config: cfg, LogOutput: &logs}, func(s *Server) {
		s.fail(fmt.Errorf("server: database %q: %w", "default", perr))
	})
	if err == nil {
		t.Fatal("Run returned nil after the failure")
	}
	if !errors.Is(err, pebble.ErrDBDoesNotExist) {
		t.Errorf("Run's error %q lost its cause", err)
	}
	// Every log line names its caller's file and line by design.
	logText := regexp.MustCompile(`"caller":"[^"]*"`).ReplaceAllString(logs.String(), "")
	for what, text := range map[string]string{"Run's error": err.Error(), "the log": logText} {
		for _, bad := range []string{root, "goroutine ", ".go:", "errorVerbose"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s holds %q:\n%s", what, bad, text)
			}
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Run's error is not one line: %q", err)
	}
}
