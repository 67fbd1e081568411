package transporttest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

var rules = []Rule{
	{Name: "RoundTrip", Summary: "bytes sent either way arrive intact, over a connection dialed each way (a short message and 1 MiB)", check: roundTrip},
	{Name: "PeerOf", Summary: "each end's PeerOf names the other node at the pin it publishes, each transport's pin its own (declared unauthenticated: Pin is \"\" and PeerOf fails with ErrUnauthenticated)", check: peerOf},
	{Name: "DialUntrusted", Summary: "Dial to a peer outside the trusted set (or trusted at no pin, when authenticating) fails with ErrUntrusted and connects to nothing", check: dialUntrusted},
	{Name: "ListenUntrusted", Summary: "a listener refuses a node outside its trusted set, or trusted at another pin: Dial fails with ErrRefused and the accepted end's PeerOf wraps ErrUntrusted", check: listenUntrusted, Authenticated: true},
	{Name: "WrongPin", Summary: "Dial fails with ErrUntrusted when the node at the address proves another pin than the peer's: a wrong pin, or another node's address", check: wrongPin, Authenticated: true},
	{Name: "TrustDropCuts", Summary: "Trust without a peer cuts its connections, dialed and accepted, at once on both ends; other peers' stay usable; it is refused after", check: trustDropCuts},
	{Name: "TrustPinChangeCuts", Summary: "Trust naming a new pin for a peer cuts its connections at the old one, at once on both ends", check: trustPinChangeCuts},
	{Name: "TrustAgain", Summary: "a peer dropped and trusted again is reached, and reaches this node, again", check: trustAgain},
	{Name: "TrustRace", Summary: "no connection to a peer survives the Trust call that drops it, also one whose handshake ran at the same time", check: trustRace},
	{Name: "Close", Summary: "Close ends the listener and every connection at once on both ends; Dial and Listen after it fail with net.ErrClosed", check: closeRule},
}

func roundTrip(e *env) error {
	ns, err := e.trusting("a", "b")
	if err != nil {
		return err
	}
	a, b := ns[0], ns[1]
	big := make([]byte, 1<<20)
	rand.Read(big)
	for _, dir := range [][2]*node{{a, b}, {b, a}} {
		from, to := dir[0], dir[1]
		d, acc, err := e.pair(from, to)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("%s dialed %s", from.id, to.id)
		if err := e.roundTrip(what, d, acc, []byte("hello from "+string(from.id))); err != nil {
			return err
		}
		if err := e.roundTrip(what+", 1 MiB", d, acc, big); err != nil {
			return err
		}
		if err := e.roundTrip(what+", the other way first", acc, d, []byte("hello from "+string(to.id))); err != nil {
			return err
		}
	}
	return nil
}

func peerOf(e *env) error {
	ns, err := e.trusting("a", "b")
	if err != nil {
		return err
	}
	a, b := ns[0], ns[1]
	if e.opts.Unauthenticated {
		if a.tr.Pin() != "" {
			return fmt.Errorf("a.Pin() is %q on a transport declared unauthenticated, want \"\"", a.tr.Pin())
		}
	} else {
		for _, n := range ns {
			if err := checkPin(n.tr.Pin()); err != nil {
				return fmt.Errorf("%s: %w", n.id, err)
			}
		}
		if a.tr.Pin() == b.tr.Pin() {
			return fmt.Errorf("two transports share pin %s: each must be a new identity", a.tr.Pin())
		}
		if !transport.Authenticates(a.tr) {
			return errors.New("transport.Authenticates is false for a transport with a pin")
		}
	}
	d, acc, err := e.pair(a, b)
	if err != nil {
		return err
	}
	for _, end := range []struct {
		who  *node
		conn net.Conn
		want *node
	}{{a, d, b}, {b, acc, a}} {
		p, err := end.who.tr.PeerOf(end.conn)
		if err := e.peerOK(end.who, err); err != nil {
			return fmt.Errorf("%s: PeerOf its connection with %s: %w", end.who.id, end.want.id, err)
		}
		want := transport.Peer{Node: end.want.id, Pin: end.want.tr.Pin()}
		if !e.opts.Unauthenticated && p != want {
			return fmt.Errorf("%s: PeerOf its connection with %s is %+v, want %+v", end.who.id, end.want.id, p, want)
		}
	}
	// A connection the transport did not make is not named.
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	if p, err := a.tr.PeerOf(x); err == nil {
		return fmt.Errorf("PeerOf a net.Pipe is %+v, want an error", p)
	}
	return nil
}

// checkPin: a pin is what a heartbeat line carries, so printable and
// without spaces; transport-mtls's are 64 lowercase hex digits.
func checkPin(pin string) error {
	if pin == "" || pin != strings.TrimSpace(pin) || strings.ContainsFunc(pin, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return fmt.Errorf("pin %q: want a non-empty printable string without spaces (a transport that authenticates)", pin)
	}
	return nil
}

func dialUntrusted(e *env) error {
	ns, err := e.makeNodes("a", "b", "c")
	if err != nil {
		return err
	}
	a, b, c := ns[0], ns[1], ns[2]
	b.trusts(a)
	// A raw listener stands at the address, to see that nothing reaches it.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer raw.Close()
	refused := func(what string, peer transport.NodeID) error {
		conn, err := a.tr.Dial(e.ctx, peer, raw.Addr().String())
		if err == nil {
			conn.Close()
			return fmt.Errorf("%s: Dial %s succeeded, want ErrUntrusted", what, peer)
		}
		if !errors.Is(err, transport.ErrUntrusted) {
			return fmt.Errorf("%s: Dial %s: %v, want an error wrapping ErrUntrusted", what, peer, err)
		}
		return nil
	}
	if err := refused("a trusting nobody yet", b.id); err != nil {
		return err
	}
	a.trusts(c)
	if err := refused("a trusting only c", b.id); err != nil {
		return err
	}
	if !e.opts.Unauthenticated {
		a.tr.Trust(map[transport.NodeID]string{b.id: ""})
		if err := refused("a trusting b at no pin", b.id); err != nil {
			return err
		}
	}
	if err := e.nothingReached(raw, "refused Dials"); err != nil {
		return err
	}
	if e.opts.Unauthenticated {
		// A peer trusted at no pin is one a plaintext transport may dial.
		a.tr.Trust(map[transport.NodeID]string{b.id: ""})
		d, acc, err := e.pair(a, b)
		if err != nil {
			return fmt.Errorf("a trusting b at no pin, declared unauthenticated: %w", err)
		}
		return e.roundTrip("a dialed b, trusted at no pin", d, acc, []byte("hello"))
	}
	return nil
}

// refusedAtListen dials from a to b, which must refuse a: Dial fails with
// ErrRefused (the caller may send again once b trusts it), and the
// connection b accepted fails PeerOf with ErrUntrusted and reads
// nothing.
func (e *env) refusedAtListen(what string, a, b *node) error {
	d, err := a.tr.Dial(e.ctx, b.id, b.addr)
	if err == nil {
		defer d.Close()
		d.Write([]byte("anything"))
		got, aerr := e.acceptFrom(b, d.LocalAddr())
		if aerr == nil && got.err == nil {
			return fmt.Errorf("%s: %s accepted %s (PeerOf %+v)", what, b.id, a.id, got.peer)
		}
		return fmt.Errorf("%s: Dial succeeded though %s refused %s: a returned connection must be accepted by both ends", what, b.id, a.id)
	}
	if !errors.Is(err, transport.ErrRefused) {
		return fmt.Errorf("%s: Dial %s, which refused %s: %v, want an error wrapping ErrRefused", what, b.id, a.id, err)
	}
	// The refused connection is the one b accepted last: its PeerOf failed.
	timeout := time.After(e.opts.Wait)
	for {
		select {
		case got := <-b.accepted:
			defer got.conn.Close()
			if got.err == nil {
				continue // not this one: none other is dialed in this rule
			}
			if !errors.Is(got.err, transport.ErrUntrusted) {
				return fmt.Errorf("%s: %s's PeerOf the refused connection: %v, want an error wrapping ErrUntrusted", what, b.id, got.err)
			}
			var buf [1]byte
			if n, rerr := got.conn.Read(buf[:]); rerr == nil {
				return fmt.Errorf("%s: %s read %d bytes from a connection it refused", what, b.id, n)
			}
			return nil
		case <-timeout:
			return fmt.Errorf("%s: %s accepted no connection from %s within %v", what, b.id, a.id, e.opts.Wait)
		}
	}
}

func listenUntrusted(e *env) error {
	ns, err := e.makeNodes("a", "b", "c")
	if err != nil {
		return err
	}
	a, b, c := ns[0], ns[1], ns[2]
	a.trusts(b)
	if err := e.refusedAtListen("b trusting nobody", a, b); err != nil {
		return err
	}
	b.trusts(c)
	if err := e.refusedAtListen("b trusting only c", a, b); err != nil {
		return err
	}
	b.tr.Trust(map[transport.NodeID]string{a.id: c.tr.Pin()})
	if err := e.refusedAtListen("b trusting a at c's pin", a, b); err != nil {
		return err
	}
	b.tr.Trust(map[transport.NodeID]string{a.id: ""})
	if err := e.refusedAtListen("b trusting a at no pin", a, b); err != nil {
		return err
	}
	// Trusted now: the same dial passes.
	b.trusts(a)
	_, _, err = e.pair(a, b)
	return err
}

func wrongPin(e *env) error {
	ns, err := e.makeNodes("a", "b", "c")
	if err != nil {
		return err
	}
	a, b, c := ns[0], ns[1], ns[2]
	b.trusts(a, c)
	c.trusts(a, b)
	refused := func(what string, peer transport.NodeID, addr string) error {
		conn, err := a.tr.Dial(e.ctx, peer, addr)
		if err == nil {
			conn.Close()
			return fmt.Errorf("%s: Dial %s at %s succeeded, want ErrUntrusted", what, peer, addr)
		}
		if !errors.Is(err, transport.ErrUntrusted) {
			return fmt.Errorf("%s: Dial %s at %s: %v, want an error wrapping ErrUntrusted", what, peer, addr, err)
		}
		return nil
	}
	a.tr.Trust(map[transport.NodeID]string{b.id: c.tr.Pin()})
	if err := refused("a trusting b at c's pin", b.id, b.addr); err != nil {
		return err
	}
	a.tr.Trust(map[transport.NodeID]string{b.id: strings.Repeat("0", len(b.tr.Pin()))})
	if err := refused("a trusting b at a made-up pin", b.id, b.addr); err != nil {
		return err
	}
	a.trusts(b, c)
	if err := refused("a dialing b at c's address", b.id, c.addr); err != nil {
		return err
	}
	// The right pin at the right address passes.
	_, _, err = e.pair(a, b)
	return err
}

// cutSetup makes a, b and c trusting each other, with a connection each
// way between a and b and one from a to c, a Read blocked on each end of
// those with b. change then alters a's trusted set; the Reads on a's
// connections with b must end at once, both ways (the accepted one only if
// the transport authenticates), and the connection with c stay usable.
func (e *env) cutSetup(change func(a, b, c *node)) (a, b, c *node, err error) {
	ns, err := e.trusting("a", "b", "c")
	if err != nil {
		return nil, nil, nil, err
	}
	a, b, c = ns[0], ns[1], ns[2]
	ab, ba, err := e.pair(a, b) // dialed by a, accepted by b
	if err != nil {
		return nil, nil, nil, err
	}
	bAcc, aAcc, err := e.pair(b, a) // dialed by b, accepted by a
	if err != nil {
		return nil, nil, nil, err
	}
	ac, ca, err := e.pair(a, c)
	if err != nil {
		return nil, nil, nil, err
	}
	reads := map[string]<-chan error{
		"a's end of the connection a dialed to b": blockedRead(ab),
		"b's end of the connection a dialed to b": blockedRead(ba),
	}
	bDialed := blockedRead(bAcc)
	aAccepted := blockedRead(aAcc)
	if !e.opts.Unauthenticated {
		reads["a's end of the connection b dialed to a"] = aAccepted
		reads["b's end of the connection b dialed to a"] = bDialed
	}
	change(a, b, c)
	if err := e.endedAll(reads); err != nil {
		return nil, nil, nil, err
	}
	if !e.opts.Unauthenticated {
		if _, err := a.tr.PeerOf(ab); !errors.Is(err, transport.ErrUntrusted) {
			return nil, nil, nil, fmt.Errorf("a's PeerOf a cut connection: %v, want an error wrapping ErrUntrusted", err)
		}
	}
	if err := e.roundTrip("a's connection with c after the change", ac, ca, []byte("still here")); err != nil {
		return nil, nil, nil, err
	}
	return a, b, c, nil
}

func trustDropCuts(e *env) error {
	a, b, _, err := e.cutSetup(func(a, b, c *node) { a.trusts(c) })
	if err != nil {
		return err
	}
	if d, err := a.tr.Dial(e.ctx, b.id, b.addr); !errors.Is(err, transport.ErrUntrusted) {
		if d != nil {
			d.Close()
		}
		return fmt.Errorf("a dialing b after dropping it: %v, want an error wrapping ErrUntrusted", err)
	}
	if !e.opts.Unauthenticated {
		return e.refusedAtListen("b dialing a after a dropped it", b, a)
	}
	return nil
}

func trustPinChangeCuts(e *env) error {
	_, _, _, err := e.cutSetup(func(a, b, c *node) {
		a.tr.Trust(map[transport.NodeID]string{b.id: b.tr.Pin() + "0", c.id: c.tr.Pin()})
	})
	return err
}

func trustAgain(e *env) error {
	a, b, c, err := e.cutSetup(func(a, b, c *node) { a.trusts(c) })
	if err != nil {
		return err
	}
	a.trusts(b, c)
	for _, dir := range [][2]*node{{a, b}, {b, a}} {
		d, acc, err := e.pair(dir[0], dir[1])
		if err != nil {
			return fmt.Errorf("trusted again: %w", err)
		}
		if err := e.roundTrip(fmt.Sprintf("%s dialed %s, trusted again", dir[0].id, dir[1].id), d, acc, []byte("back")); err != nil {
			return err
		}
	}
	return nil
}

func trustRace(e *env) error {
	ns, err := e.trusting("a", "b")
	if err != nil {
		return err
	}
	a, b := ns[0], ns[1]
	// How long a dial takes here: the rounds spread Trust's call over
	// twice that, so that it lands before, during and after handshakes.
	start := time.Now()
	if _, _, err := e.pair(a, b); err != nil {
		return err
	}
	span := 2 * time.Since(start)
	for round := range e.opts.Rounds {
		a.trusts(b)
		// Dials both ways race a's Trust dropping b; whatever they return
		// must be dead once it has returned.
		var wg sync.WaitGroup
		var ab, bDialed net.Conn
		wg.Go(func() { ab, _ = a.tr.Dial(e.ctx, b.id, b.addr) })
		wg.Go(func() { bDialed, _ = b.tr.Dial(e.ctx, a.id, a.addr) })
		time.Sleep(span * time.Duration(round) / time.Duration(e.opts.Rounds))
		a.trusts()
		wg.Wait()
		reads := map[string]<-chan error{}
		if ab != nil {
			defer ab.Close()
			reads[fmt.Sprintf("round %d: a's end of a connection a dialed to b", round)] = blockedRead(ab)
		}
		if bDialed != nil && !e.opts.Unauthenticated {
			defer bDialed.Close()
			got, err := e.acceptFrom(a, bDialed.LocalAddr())
			if err != nil {
				return fmt.Errorf("round %d: b dialed a: %w", round, err)
			}
			reads[fmt.Sprintf("round %d: a's end of a connection b dialed to a", round)] = blockedRead(got.conn)
		}
		if err := e.endedAll(reads); err != nil {
			return err
		}
	}
	return nil
}

func closeRule(e *env) error {
	ns, err := e.trusting("a", "b")
	if err != nil {
		return err
	}
	a, b := ns[0], ns[1]
	ab, ba, err := e.pair(a, b)
	if err != nil {
		return err
	}
	bDialed, aAcc, err := e.pair(b, a)
	if err != nil {
		return err
	}
	reads := map[string]<-chan error{
		"a's end of the connection a dialed":   blockedRead(ab),
		"b's end of the connection a dialed":   blockedRead(ba),
		"a's end of the connection a accepted": blockedRead(aAcc),
		"b's end of the connection a accepted": blockedRead(bDialed),
	}
	if err := a.tr.Close(); err != nil {
		return fmt.Errorf("a.Close(): %w", err)
	}
	if err := e.endedAll(reads); err != nil {
		return err
	}
	select {
	case <-a.ended:
	case <-time.After(e.opts.Wait):
		return fmt.Errorf("a's listener still accepting %v after Close", e.opts.Wait)
	}
	if d, err := a.tr.Dial(e.ctx, b.id, b.addr); !errors.Is(err, net.ErrClosed) {
		if d != nil {
			d.Close()
		}
		return fmt.Errorf("a Dial after Close: %v, want an error wrapping net.ErrClosed", err)
	}
	if l, err := a.tr.Listen(e.ctx, "127.0.0.1:0"); !errors.Is(err, net.ErrClosed) {
		if l != nil {
			l.Close()
		}
		return fmt.Errorf("a Listen after Close: %v, want an error wrapping net.ErrClosed", err)
	}
	if err := a.tr.Close(); err != nil {
		return fmt.Errorf("a second Close: %v, want nil", err)
	}
	// b is unharmed: it still listens.
	c, err := net.Dial("tcp", b.addr)
	if err != nil {
		return fmt.Errorf("b after a's Close: %w", err)
	}
	return c.Close()
}
