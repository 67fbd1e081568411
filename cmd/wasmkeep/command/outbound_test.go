package command

import (
	"encoding/pem"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

func TestOutboundFlags(t *testing.T) {
	srv := httptest.NewTLSServer(nil)
	srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not a certificate"), 0o600)

	var opts node.Options
	err := outbound(&opts, flagsGiven, config.Node{}, serveFlags{
		allowOutbound:      []string{"10.1.2.3/8", "fd00::1"},
		allowOutboundPorts: []string{"25"},
		outboundCAs:        []string{ca},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::1/128")}
	if !slices.Equal(opts.AllowOutbound, want) || !slices.Equal(opts.AllowOutboundPorts, []int{25}) ||
		len(opts.OutboundCAs) != 1 || !opts.OutboundCAs[0].Equal(srv.Certificate()) {
		t.Errorf("got %v %v %d CAs", opts.AllowOutbound, opts.AllowOutboundPorts, len(opts.OutboundCAs))
	}
	for f, want := range map[*serveFlags]string{
		{allowOutbound: []string{"10.0.0.0/33"}}:  `--allow-outbound "10.0.0.0/33"`,
		{allowOutboundPorts: []string{"0"}}:       `--allow-outbound-port "0"`,
		{allowOutboundPorts: []string{"http"}}:    `--allow-outbound-port "http"`,
		{outboundCAs: []string{junk}}:             "--outbound-ca " + junk + ": no PEM CERTIFICATE block",
		{outboundCAs: []string{dir + "/missing"}}: "--outbound-ca " + dir + "/missing: open",
	} {
		if err := outbound(&node.Options{}, flagsGiven, config.Node{}, *f); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%+v: %v, want %s", *f, err, want)
		}
	}
}

// flagsGiven says every flag was given.
func flagsGiven(string) bool { return true }

// Without their flags, the same settings come from the node section, and
// an error names the key.
func TestOutboundSettings(t *testing.T) {
	noFlags := func(string) bool { return false }
	var opts node.Options
	err := outbound(&opts, noFlags, config.Node{AllowOutbound: []string{"10.1.0.0/16"}, AllowOutboundPort: []string{"587"}},
		serveFlags{allowOutbound: []string{"ignored/8"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opts.AllowOutbound, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}) || !slices.Equal(opts.AllowOutboundPorts, []int{587}) {
		t.Errorf("got %v %v", opts.AllowOutbound, opts.AllowOutboundPorts)
	}
	for ns, want := range map[*config.Node]string{
		{AllowOutbound: []string{"10.0.0.0/33"}}:   `node.allow_outbound "10.0.0.0/33": want a CIDR range`,
		{AllowOutboundPort: []string{"smtp"}}:      `node.allow_outbound_port "smtp": want a port number`,
		{OutboundCA: []string{"/nonexistent.pem"}}: "node.outbound_ca /nonexistent.pem: open",
	} {
		if err := outbound(&node.Options{}, noFlags, *ns, serveFlags{}); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%+v: %v, want %s", *ns, err, want)
		}
	}
}
