package fallbackroots

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The system roots are the process's, loaded once: each case runs in a
// child process of this test binary, on roots given by SSL_CERT_FILE and
// SSL_CERT_DIR, and reports how many roots it then trusts.
func TestMain(m *testing.M) {
	if os.Getenv("FALLBACKROOTS_CHILD") != "" {
		Ensure()
		pool, err := x509.SystemCertPool()
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error())
			os.Exit(0)
		}
		switch {
		case pool.Equal(x509.NewCertPool()):
			os.Stdout.WriteString("none")
		case pool.Equal(bundlePool()):
			os.Stdout.WriteString("bundle")
		default:
			os.Stdout.WriteString("system")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func trusted(t *testing.T, certFile string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FALLBACKROOTS_CHILD=1", "SSL_CERT_FILE="+certFile, "SSL_CERT_DIR="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	return string(out)
}

func TestEnsureSetsTheBundleOnlyWhereTheSystemHasNoRoots(t *testing.T) {
	t.Parallel()
	if got := trusted(t, filepath.Join(t.TempDir(), "absent.pem")); got != "bundle" {
		t.Errorf("no system roots: the process trusts %s, want the bundle", got)
	}
	if got := trusted(t, selfSigned(t)); got != "system" {
		t.Errorf("a system root: the process trusts %s, want the system's alone", got)
	}
}

// selfSigned writes a CA certificate to a PEM file and returns its path.
func selfSigned(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
