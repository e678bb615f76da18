package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/primary"
)

// ErrUnsupportedPlatform is returned by New on any platform but Linux: the
// archive's custody checks and the credential store need Linux system calls,
// and the server refuses rather than run without them.
var ErrUnsupportedPlatform = errors.New("server: riffdb requires Linux")

// Classes of StartupError. A failure to start matches exactly one of them
// with errors.Is, except a failure outside these classes (telemetry, an
// invalid configuration, ErrUnsupportedPlatform), which matches none.
var (
	// ErrListen: the API (server.listen) or metrics (server.metrics_listen)
	// address cannot be bound.
	ErrListen = errors.New("server: cannot listen")
	// ErrContract: a database's contract file is missing, unreadable or
	// invalid.
	ErrContract = errors.New("server: contract refused")
	// ErrCredentials: the credential store cannot be opened (a wrong mode
	// or owner, damage, an unreadable file).
	ErrCredentials = errors.New("server: credential store refused")
	// ErrDatabase: a database's primary store cannot be opened. The error
	// also matches primary.ErrBusy when another process holds the store,
	// primary.ErrCorrupt when it is damaged (Pebble's corruption included)
	// and primary.ErrIncompatible when its format is not supported.
	ErrDatabase = errors.New("server: primary store cannot be opened")
	// ErrInterrupted: ctx ended (the first SIGINT or SIGTERM) before the
	// server was ready. What was opened has been closed again; a primary
	// store whose opening could not be interrupted is left to the
	// process's exit (see primary.Open).
	ErrInterrupted = errors.New("server: startup interrupted")
)

// StartupError is returned by New and Run when the server cannot start. Its
// message names the option, the database alias and the role concerned and
// never a filesystem path; errors.Is and errors.As see through it to its
// class (ErrListen, ErrContract, ErrCredentials, ErrDatabase) and to the
// underlying error, whose own text may name paths and is for logs only.
type StartupError struct {
	msg     string
	classes []error
	cause   error
}

func (e *StartupError) Error() string { return e.msg }

// Unwrap returns the error's classes and its cause.
func (e *StartupError) Unwrap() []error { return append(slices.Clip(e.classes), e.cause) }

// newStartupError returns a failure to start caused by cause: what, then the
// cause's text with every path removed.
func newStartupError(cfg *config.Config, what string, cause error, classes ...error) *StartupError {
	msg := scrub(cfg, cause)
	if what != "" {
		msg = what + ": " + msg
	}
	return &StartupError{msg: msg, classes: classes, cause: cause}
}

// primaryError classifies a failure of primary.Open for the database alias.
func (s *Server) primaryError(alias string, err error) *StartupError {
	what := fmt.Sprintf("database %q: ", alias)
	switch {
	case errors.Is(err, primary.ErrBusy): // primary.Open could not take the store's lock
		return &StartupError{
			msg:     what + "the primary store is held by another process (is another riffdb server running on it?)",
			classes: []error{ErrDatabase, primary.ErrBusy}, cause: err,
		}
	case errors.Is(err, primary.ErrCorrupt) || pebble.IsCorruptionError(err):
		return newStartupError(s.cfg, what+"the primary store is corrupt", err, ErrDatabase, primary.ErrCorrupt)
	case errors.Is(err, primary.ErrStorageFull):
		return &StartupError{
			msg: what + "the filesystem of the database path is full: the storage engine cannot write what opening the store needs; " +
				"free space on it and start again (nothing acknowledged is lost)",
			classes: []error{ErrDatabase, primary.ErrStorageFull}, cause: err,
		}
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return interrupted(err)
	case errors.Is(err, primary.ErrIncompatible):
		return newStartupError(s.cfg, what+"the primary store is incompatible with this version", err, ErrDatabase)
	case errors.Is(err, primary.ErrUnprotected):
		return &StartupError{
			msg:     what + "the database path is accessible to other users: make its directory private (chmod 700) after checking who changed it",
			classes: []error{ErrDatabase, primary.ErrUnprotected}, cause: err,
		}
	default:
		return newStartupError(s.cfg, what+"the primary store cannot be opened", err, ErrDatabase)
	}
}

// scrub returns err's text without filesystem paths: pathless.ErrorText removes the
// paths of *fs.PathError and *os.LinkError anywhere in the tree of wrapped
// and joined errors, and every path cfg configures that remains (a storage
// engine may quote one in its own text) is replaced by the name of its role.
// Joined errors are separated by "; ".
func scrub(cfg *config.Config, err error) string {
	msg := pathless.ErrorText(err)
	type role struct{ path, name string }
	roles := []role{{cfg.Server.CredentialPath, "<server.credential_path>"},
		{cfg.Server.TLSCertPath, "<server.tls_cert_path>"}, {cfg.Server.TLSKeyPath, "<server.tls_key_path>"}}
	for _, d := range cfg.Databases {
		roles = append(roles,
			role{d.Path, fmt.Sprintf("<path of database %q>", d.Alias)},
			role{d.Contract, fmt.Sprintf("<contract of database %q>", d.Alias)},
			role{d.BackupRoot, fmt.Sprintf("<backup_root of database %q>", d.Alias)},
			role{d.ProjectionRoot, fmt.Sprintf("<projection_root of database %q>", d.Alias)},
			role{d.ReplicationPath, fmt.Sprintf("<replication_path of database %q>", d.Alias)})
		if d.Outbox != nil {
			roles = append(roles, role{d.Outbox.Directory, fmt.Sprintf("<outbox directory of database %q>", d.Alias)})
		}
	}
	// Longest first, so that a path inside another is replaced whole.
	slices.SortFunc(roles, func(a, b role) int { return len(b.path) - len(a.path) })
	for _, r := range roles {
		if r.path != "" {
			msg = strings.ReplaceAll(msg, r.path, r.name)
		}
	}
	// Lines of a stack trace and any absolute path the storage engine
	// formatted into its own text go too.
	return pathless.Text(msg)
}

// interrupted is the failure to start of a server whose ctx ended first.
func interrupted(cause error) *StartupError {
	return &StartupError{
		msg:     "a signal stopped the server before it was ready: nothing was served, and every store opened so far was closed",
		classes: []error{ErrInterrupted}, cause: cause,
	}
}

// pathFree is an error whose message has no paths and that still matches
// its cause's chain.
type pathFree struct {
	msg   string
	cause error
}

func (e pathFree) Error() string { return e.msg }
func (e pathFree) Unwrap() error { return e.cause }
