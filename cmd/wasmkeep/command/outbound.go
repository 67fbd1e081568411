package command

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// outbound applies node.allow_outbound, node.allow_outbound_port and
// node.outbound_ca to opts, each replaced by its flag where one is given
// (set says which are), naming the bad value and where it was given when one
// is.
func outbound(opts *node.Options, set func(flag string) bool, ns config.Node, f serveFlags) error {
	ranges := flagOrKey(set, "allow-outbound", f.allowOutbound, ns.AllowOutbound)
	for _, s := range ranges.values {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return fmt.Errorf("%s %q: want a CIDR range such as 10.0.0.0/8 or fd00::/8, or one address", ranges.name, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		opts.AllowOutbound = append(opts.AllowOutbound, p.Masked())
	}
	ports := flagOrKey(set, "allow-outbound-port", f.allowOutboundPorts, ns.AllowOutboundPort)
	for _, s := range ports.values {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%s %q: want a port number, 1 to 65535", ports.name, s)
		}
		opts.AllowOutboundPorts = append(opts.AllowOutboundPorts, p)
	}
	cas := flagOrKey(set, "outbound-ca", f.outboundCAs, ns.OutboundCA)
	for _, file := range cas.values {
		certs, err := readCerts(file)
		if err != nil {
			return fmt.Errorf("%s %s: %w", cas.name, file, err)
		}
		opts.OutboundCAs = append(opts.OutboundCAs, certs...)
	}
	return nil
}

// listSetting is a list and where it was given.
type listSetting struct {
	name   string // the flag (--allow-outbound) or the key (node.allow_outbound)
	values []string
}

// flagOrKey is a repeatable flag's values if it was given, else those of its
// node key, named as the flag with underscores.
func flagOrKey(set func(flag string) bool, flag string, flagValues, keyValues []string) listSetting {
	if set(flag) {
		return listSetting{"--" + flag, flagValues}
	}
	return listSetting{"node." + strings.ReplaceAll(flag, "-", "_"), keyValues}
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
