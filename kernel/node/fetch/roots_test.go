package fetch

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Where the system has no roots (SSL_CERT_FILE and SSL_CERT_DIR name empty
// places, as in a minimal container), the roots a guest's fetch trusts are
// Mozilla's, not none (issue 24, item 11): the fetcher's TLS set-up calls
// fallbackroots.Ensure (issue 30 moved it there from package init). x509
// reads the variables once, so a child process runs the check. Fails with
// the Ensure call removed from tlsConfig.
func TestFetchTrustsTheBundleWithoutSystemRoots(t *testing.T) {
	if os.Getenv("WASMKEEPTEST_NO_SYSTEM_ROOTS") == "1" {
		if roots := tlsConfig(nil).RootCAs; roots == nil || roots.Equal(x509.NewCertPool()) {
			t.Fatal("a fetch would trust no root")
		}
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFetchTrustsTheBundleWithoutSystemRoots$", "-test.v")
	cmd.Env = append(os.Environ(), "WASMKEEPTEST_NO_SYSTEM_ROOTS=1",
		"SSL_CERT_FILE="+filepath.Join(dir, "none.pem"), "SSL_CERT_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
