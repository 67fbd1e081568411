package transporttest_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/transporttest"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
	"github.com/wasmkeep/wasmkeep/kernel/transport/plaintext"
	mtlstransport "github.com/wasmkeep/wasmkeep/plugins/transport-mtls"
)

func mtls() (transport.Transport, error) { return mtlstransport.Open(5 * time.Second) }

func plain() (transport.Transport, error) { return plaintext.New(), nil }

// addsOnly is a transport whose Trust merges the new set into the old one:
// a peer once trusted is never dropped (a changed pin still replaces the
// old one).
type addsOnly struct {
	transport.Transport
	mu  sync.Mutex
	set map[transport.NodeID]string
}

func (a *addsOnly) Trust(peers map[transport.NodeID]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.set == nil {
		a.set = map[transport.NodeID]string{}
	}
	maps.Copy(a.set, peers)
	a.Transport.Trust(a.set)
}

// misnamed names every peer a, at the pin it proved.
type misnamed struct{ transport.Transport }

func (m misnamed) PeerOf(c net.Conn) (transport.Peer, error) {
	p, err := m.Transport.PeerOf(c)
	p.Node = "a"
	return p, err
}

// refusalUntyped reports a refusal at the handshake as any other failed
// dial: the caller cannot tell it may send again.
type refusalUntyped struct{ transport.Transport }

func (r refusalUntyped) Dial(ctx context.Context, peer transport.NodeID, addr string) (net.Conn, error) {
	c, err := r.Transport.Dial(ctx, peer, addr)
	if errors.Is(err, transport.ErrRefused) {
		err = errors.New(err.Error())
	}
	return c, err
}

func names(rules []transporttest.Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Name)
	}
	return out
}

func flawed(f transporttest.Factory, wrap func(transport.Transport) transport.Transport) transporttest.Factory {
	return func() (transport.Transport, error) {
		tr, err := f()
		if err != nil {
			return nil, err
		}
		return wrap(tr), nil
	}
}

// The suite can fail: each flaw fails exactly the rules that should see it,
// and the honest transports pass.
func TestFlawsCaught(t *testing.T) {
	addOnly := func(tr transport.Transport) transport.Transport { return &addsOnly{Transport: tr} }
	misname := func(tr transport.Transport) transport.Transport { return misnamed{tr} }
	untyped := func(tr transport.Transport) transport.Transport { return refusalUntyped{tr} }
	neverDrops := []string{"TrustDropCuts", "TrustAgain", "TrustRace"}
	for _, c := range []struct {
		name string
		f    transporttest.Factory
		opts transporttest.Options
		fail []string
	}{
		{"mtls", mtls, transporttest.Options{}, nil},
		{"plaintext", plain, transporttest.Options{Unauthenticated: true}, nil},
		{"mtls/TrustAddsOnly", flawed(mtls, addOnly), transporttest.Options{}, neverDrops},
		{"plaintext/TrustAddsOnly", flawed(plain, addOnly), transporttest.Options{Unauthenticated: true}, neverDrops},
		{"mtls/PeerOfMisnamed", flawed(mtls, misname), transporttest.Options{}, []string{"PeerOf"}},
		{"mtls/RefusalUntyped", flawed(mtls, untyped), transporttest.Options{}, []string{"ListenUntrusted", "TrustDropCuts"}},
		// Plaintext that does not say so: every rule wants PeerOf to work,
		// or a peer at no pin refused.
		{"plaintext/Undeclared", plain, transporttest.Options{}, names(transporttest.Rules())},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Rounds = 5
			if c.fail != nil {
				c.opts.Wait = time.Second // what the flaw leaves blocked is waited for this long
			}
			results, err := transporttest.Check(t.Context(), c.f, c.opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			var failed []string
			for _, r := range results {
				if r.Failed() {
					failed = append(failed, r.Rule.Name)
					t.Logf("%s: %v", r.Rule.Name, r.Err)
				}
			}
			if len(results) != len(transporttest.Rules()) || !slices.Equal(failed, c.fail) {
				t.Errorf("%d results, failed %v; want %d, failed %v", len(results), failed, len(transporttest.Rules()), c.fail)
			}
		})
	}
}
