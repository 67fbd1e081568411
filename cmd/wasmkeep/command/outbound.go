package command

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// outbound applies --allow-outbound, --allow-outbound-port and
// --outbound-ca to opts, naming the bad value when one is.
func outbound(opts *node.Options, f serveFlags) error {
	for _, s := range f.allowOutbound {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return fmt.Errorf("--allow-outbound %q: want a CIDR range such as 10.0.0.0/8 or fd00::/8, or one address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		opts.AllowOutbound = append(opts.AllowOutbound, p.Masked())
	}
	for _, s := range f.allowOutboundPorts {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("--allow-outbound-port %q: want a port number, 1 to 65535", s)
		}
		opts.AllowOutboundPorts = append(opts.AllowOutboundPorts, p)
	}
	for _, file := range f.outboundCAs {
		certs, err := readCerts(file)
		if err != nil {
			return fmt.Errorf("--outbound-ca %s: %w", file, err)
		}
		opts.OutboundCAs = append(opts.OutboundCAs, certs...)
	}
	return nil
}

// readCerts reads the PEM certificates of file; it must hold at least one.
func readCerts(file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no PEM CERTIFICATE block")
	}
	return certs, nil
}
