// Package fallbackroots makes Mozilla's root list (x509roots/fallback's
// bundle) the system roots where the system has none (a minimal container
// without ca-certificates), as importing golang.org/x/crypto/x509roots/fallback
// does, but at the first outbound TLS client rather than in package init:
// parsing the bundle is some 5 ms of CPU and 190 page faults, a sixteenth
// of a start that makes no TLS connection (issue 30, bench/README.md).
//
// Every client that trusts the system roots calls Ensure before its first
// handshake: guests' fetches and the S3 bucket.
package fallbackroots

import (
	"crypto/x509"
	"sync"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Ensure loads the system's roots and, if there are none, sets the bundle's
// as the fallback (x509.SetFallbackRoots). Only the first call does the work.
var Ensure = sync.OnceFunc(func() {
	sys, err := x509.SystemCertPool()
	if err == nil && !sys.Equal(x509.NewCertPool()) {
		return
	}
	x509.SetFallbackRoots(bundlePool())
})

func bundlePool() *x509.CertPool {
	p := x509.NewCertPool()
	for c := range bundle.Roots() {
		cert, err := x509.ParseCertificate(c.Certificate)
		if err != nil {
			panic(err) // the bundle is built into the binary, and its own tests parse it
		}
		if c.Constraint == nil {
			p.AddCert(cert)
		} else {
			p.AddCertWithConstraint(cert, c.Constraint)
		}
	}
	return p
}
