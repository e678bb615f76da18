package cli

import (
	"errors"
	"io"
	"strings"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
)

// maxTokenFileSize bounds what readTokenFile reads: a token is 50 bytes,
// and a --token-file naming a device or a huge file must fail at once.
const maxTokenFileSize = 4096

// bearerToken returns the token of the --token-file at path, or of
// $RIFFDB_TOKEN when path is empty. It is the one way the commands that talk
// to a server get their token.
func bearerToken(path string) (string, error) {
	if path != "" {
		return readTokenFile(path)
	}
	if token := getenv("RIFFDB_TOKEN"); token != "" {
		return token, nil
	}
	return "", Local("no_token", "no token: pass --token-file FILE or set RIFFDB_TOKEN")
}

// readTokenFile reads a bearer token from the file at path. Like ssh with a
// private key, it refuses a file that group or others may read or write
// (token_file_unprotected: the token grants what it grants to anyone who
// reads it). The file must be a regular file (a symbolic link to one is
// followed; it is opened without blocking, so a FIFO is refused rather than
// waited on) of at most maxTokenFileSize bytes, holding one token on one
// line; surrounding white space, such as the final newline, is dropped.
// Errors never contain the path or the file's content.
func readTokenFile(path string) (string, error) {
	f, st, err := regularfile.Open(path, regularfile.Follow)
	if errors.Is(err, regularfile.ErrNotRegular) {
		return "", Local("token_unreadable", "cannot read the --token-file: not a regular file")
	}
	if err != nil {
		return "", Local("token_unreadable", "cannot read the --token-file: %v", err)
	}
	defer f.Close()
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", Local("token_file_unprotected",
			"the --token-file is accessible to group or others (mode %04o): anyone who reads it holds the token; "+
				"run chmod 600 on it (and consider revoking the token if others could read it)", uint32(perm))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileSize+1))
	if err != nil {
		return "", Local("token_unreadable", "cannot read the --token-file: %v", pathless.Error(err))
	}
	if len(b) > maxTokenFileSize {
		return "", Local("token_file_invalid", "the --token-file is larger than %d bytes; it must hold only the token", maxTokenFileSize)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", Local("no_token", "the --token-file is empty")
	}
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", Local("token_file_invalid", "the --token-file must hold one token on one line, without spaces or control characters")
	}
	return token, nil
}
