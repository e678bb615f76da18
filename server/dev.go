package server

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
)

// DevContract is the sample contract of the embedded default configuration.
//
//go:embed dev_contract.toml
var DevContract []byte

// DevSetup prepares the embedded default configuration under root (made
// absolute): a private data folder, the sample contract, the outbox directory
// and the backup root (0700, precreated as the spec requires), and a
// development token with every permission, created once and kept in
// root/dev-token (0600). It returns the parsed configuration and the token.
// A dev-token that is not a regular file of at most maxDevTokenBytes (a
// FIFO, a symbolic link) is refused, not waited on.
func DevSetup(root string, env func(string) string, o config.Overrides) (*config.Config, string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, "", fmt.Errorf("server: create the dev data folder: %w", pathless.Error(err))
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, "", err
	}
	cfg, err := config.Parse(config.DevTOML(root), env, o)
	if err != nil {
		return nil, "", err
	}
	contractPath := cfg.Databases[0].Contract
	if _, err := os.Stat(contractPath); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(contractPath, DevContract, 0o600); err != nil {
			return nil, "", err
		}
	}
	for _, d := range cfg.Databases {
		for _, dir := range []string{d.BackupRoot, outboxDirectory(d)} {
			if dir == "" {
				continue
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, "", err
			}
			if err := os.Chmod(dir, 0o700); err != nil {
				return nil, "", err
			}
		}
	}
	tokenPath := filepath.Join(root, "dev-token")
	b, _, err := regularfile.Read(tokenPath, maxDevTokenBytes, regularfile.NoFollow)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return cfg, strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("server: the dev token file cannot be read (remove it to make a new token): %w", err)
	}
	creds, err := capability.Open(cfg.Server.CredentialPath)
	if err != nil {
		return nil, "", err
	}
	token, _, err := creds.Create("dev", capability.AllPermissions(), "")
	if err != nil {
		return nil, "", err
	}
	if err := writeDevToken(tokenPath, token); err != nil {
		return nil, "", fmt.Errorf("server: write the dev token file: %w", pathless.Error(err))
	}
	return cfg, token, nil
}

// maxDevTokenBytes bounds what is read of the dev token file.
const maxDevTokenBytes = 4096

// writeDevToken writes token to a new file (0600) at name; an empty
// dev-token file is replaced. It never opens anything that exists but a
// regular file, so it cannot block on a FIFO.
func writeDevToken(name, token string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(token + "\n")
	return errors.Join(err, f.Close())
}

// outboxDirectory returns d's outbox directory, or "" without an outbox.
func outboxDirectory(d config.Database) string {
	if d.Outbox == nil {
		return ""
	}
	return d.Outbox.Directory
}
