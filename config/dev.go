package config

import (
	_ "embed"
	"fmt"
	"path/filepath"
	"strings"
)

//go:embed dev.toml
var devTemplate string

// DevTOML returns the embedded development configuration with every path
// under the absolute directory root: the credential store at
// root/credentials, one database "default" at root/db whose contract file is
// root/contract.toml, and an outbox archive directory root/outbox with a
// quota of 1 GiB. root is cleaned and escaped as a TOML basic string, so any
// characters, quotes and backslashes included, survive. The caller creates
// the directories with the right modes.
func DevTOML(root string) []byte {
	root = filepath.Clean(root)
	if root == "/" {
		root = ""
	}
	return []byte(strings.ReplaceAll(devTemplate, "{{ROOT}}", tomlEscape(root)))
}

// tomlEscape returns s escaped for the inside of a TOML basic string.
func tomlEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
