package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
)

// ErrTLS classes a StartupError whose TLS certificate or key
// (server.tls_cert_path, server.tls_key_path) is refused: unreadable, not a
// regular file, a key readable by others, or not a valid pair.
var ErrTLS = errors.New("server: TLS certificate or key refused")

// maxPEMBytes bounds what is read of a certificate or key file.
const maxPEMBytes = 1 << 20

// loadTLS reads the API listener's certificate chain and private key and
// returns the listener's TLS configuration: TLS 1.2 or later, Go's default
// (forward-secret, AEAD) cipher suites. The key must be a private file, like
// the credential store. Messages name the options, never the paths.
func loadTLS(certPath, keyPath string) (*tls.Config, error) {
	certPEM, err := readPEM("server.tls_cert_path", certPath, false)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM("server.tls_key_path", keyPath, true)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("server.tls_cert_path and server.tls_key_path are not a valid certificate and private key pair: %w", err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("server.tls_cert_path: the certificate cannot be parsed: %w", err)
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}

// readPEM reads a regular file of at most maxPEMBytes (a symbolic link to
// one is followed; it is opened without blocking, so a FIFO is refused, not
// waited on); with private set it refuses a file that its group or others
// may access.
func readPEM(option, path string, private bool) ([]byte, error) {
	data, fi, err := regularfile.Read(path, maxPEMBytes, regularfile.Follow)
	switch {
	case errors.Is(err, regularfile.ErrNotRegular):
		return nil, fmt.Errorf("%s: not a regular file", option)
	case errors.Is(err, regularfile.ErrTooLarge):
		return nil, fmt.Errorf("%s: larger than %d bytes", option, maxPEMBytes)
	case err != nil:
		return nil, fmt.Errorf("%s: cannot be opened: %w", option, err)
	}
	if private && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: the private key may be read by its group or others (mode %#o): make it private (chmod 600)", option, fi.Mode().Perm())
	}
	return data, nil
}
