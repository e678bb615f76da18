package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key
// (mode keyMode) under dir and returns their paths and a pool trusting it.
func writeCert(t *testing.T, dir string, keyMode os.FileMode) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "riffdb test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), keyMode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyPath, keyMode); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

func TestAPIServesTLS12AndLater(t *testing.T) {
	certPath, keyPath, pool := writeCert(t, t.TempDir(), 0o600)
	s, token := startDev(t, func(c *config.Config) { c.Server.TLSCertPath, c.Server.TLSKeyPath = certPath, keyPath })
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+s.APIAddr()+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("stats over TLS: %d %+v", resp.StatusCode, resp.TLS)
	}
	// TLS 1.1 is refused.
	old := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}}
	if resp, err := old.Get("https://" + s.APIAddr() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a TLS 1.1 client was served")
	}
	// Cleartext HTTP gets no API response.
	resp, err = http.Get("http://" + s.APIAddr() + "/healthz")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("cleartext request served: %s", body)
		}
	}
	// The metrics listener stays plain HTTP (it carries no token).
	if resp, err := http.Get("http://" + s.MetricsAddr() + "/metrics"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %v", err)
	} else {
		resp.Body.Close()
	}
}

func TestTLSMaterialIsChecked(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, _ := writeCert(t, dir, 0o600)
	_, openKey, _ := writeCert(t, t.TempDir(), 0o644)
	_, otherKey, _ := writeCert(t, t.TempDir(), 0o600)
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"key readable by others", certPath, openKey, "server.tls_key_path: the private key may be read by its group or others"},
		{"key of another certificate", certPath, otherKey, "not a valid certificate and private key pair"},
		{"missing certificate", filepath.Join(dir, "absent.pem"), keyPath, "server.tls_cert_path: cannot be opened"},
		{"directory as key", certPath, dir, "server.tls_key_path: not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := DevSetup(filepath.Join(t.TempDir(), "dev"), nil, config.Overrides{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Server.TLSCertPath, cfg.Server.TLSKeyPath = tc.cert, tc.key
			s, err := New(context.Background(), Options{Config: cfg, LogOutput: io.Discard})
			if err == nil {
				_ = s.Stop(context.Background())
				t.Fatal("started")
			}
			if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrTLS with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "/") {
				t.Fatalf("the error names a path: %v", err)
			}
		})
	}
}
