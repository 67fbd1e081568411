package peers

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// Headers between nodes. Forwarded marks a request a node sent on to an
// actor's holder: it only stops it being forwarded again, and gives no
// privilege. NodeHeader names the node that answered, on every response
// for an actor. NotHeldHeader marks a node's 503 to a forwarded request
// for an actor it does not hold: nothing of it ran there. Like every
// x-wasmkeep- header, a guest's is dropped from its answer, so only a
// node says it.
const (
	ForwardedHeader = "x-wasmkeep-forwarded"
	NodeHeader      = "x-wasmkeep-node"
	NotHeldHeader   = "x-wasmkeep-not-held"
)

// What the client of a forwarded request is told when the holder gave no
// answer (book, Running a cluster: How it works).
const (
	msgNotAnswered = "the actor's node did not answer; retry"
	msgLate        = "the actor's node did not answer in time"
)

// MsgUnreachable is the 503's text for a request whose actor's node
// cannot be reached: no route to it, its lease not run out yet, or a
// request kept through a failover whose wait ended unserved.
const MsgUnreachable = "the actor's node is not reachable; retry"

// Forward sends an outside request on to peer, the actor's holder, once,
// and answers w with the holder's answer, or, for a WebSocket upgrade the
// holder accepted, joins the client's connection to the holder's. With no
// answer: 503 with Retry-After (nothing sent, a connection that could not
// be opened or that failed before the answer), or 504 without one when a
// written request got no answer in time (it may have run; an upgrade gets
// the 503). It returns the holder's status (0 with no answer) and the
// failure, for counting, or nil.
//
// With again set, a request that failed untouched (not sent, and nothing
// of its body read) is not answered: the failure says so (Untouched), and
// the caller may send it elsewhere. So is one the peer refused as not
// held (NotHeldHeader: it ran nothing; believed from a peer whose
// heartbeat names nodelease.CapabilityNotHeld) with nothing of its body
// read: the peer released the actor since the caller's owner hint named
// it. The mark never reaches the client. Without it, an upgrade the holder
// refused at the handshake is sent once more after this node's next
// heartbeat (resend.go), the client waiting.
func (n *Network) Forward(w http.ResponseWriter, r *http.Request, peer string, again bool) (int, *Failure) {
	upgrade := isUpgrade(r.Header)
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL = &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	out.Close = false
	callsign.Strip(out.Header) // a client's are never believed, only what a node sets or signs
	removeHopByHop(out.Header, upgrade)
	out.Header.Set(ForwardedHeader, n.cfg.Self)
	body := &watchedBody{ReadCloser: r.Body}
	out.Body = body
	if r.ContentLength == 0 {
		out.Body = nil
	}
	beat := n.afterBeat()
	resp, err := n.Send(r.Context(), peer, out)
	if upgrade && out.Body == nil && !again && n.waitToResend(r.Context(), err, beat) {
		resp, err = n.Send(r.Context(), peer, out) // refused at the handshake: sent once more (resend.go)
	}
	var f *Failure
	if errors.As(err, &f) {
		if r.Context().Err() != nil {
			return 0, f // the client left: nobody to answer
		}
		if again && !f.Sent() && !body.read {
			f.Untouched = true
			return 0, f
		}
		switch {
		case f.Kind == NoAnswer && !upgrade:
			http.Error(w, msgLate, http.StatusGatewayTimeout)
		case f.Kind == NoRoute:
			w.Header().Set("Retry-After", "1")
			http.Error(w, MsgUnreachable, http.StatusServiceUnavailable)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, msgNotAnswered, http.StatusServiceUnavailable)
		}
		return 0, f
	}
	defer resp.Body.Close()
	if again && !body.read && resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(NotHeldHeader) != "" && n.marksNotHeld(peer) {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // read to its end, so the connection is kept
		return resp.StatusCode, &Failure{Peer: peer, Kind: NotHeld, Err: errNotHeld, Untouched: true}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		n.join(w, resp)
		return resp.StatusCode, nil
	}
	h := w.Header()
	removeHopByHop(resp.Header, false)
	resp.Header.Del(NotHeldHeader) // between nodes only
	for k, vs := range resp.Header {
		h[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return resp.StatusCode, nil
}

// marksNotHeld reports whether peer's heartbeat says it marks a refusal
// as not held and drops a guest's such header (an older build's answer
// could carry a guest's).
func (n *Network) marksNotHeld(peer string) bool {
	p, err := n.cfg.View.Live(peer)
	return err == nil && p.Object.Info.HasCapability(nodelease.CapabilityNotHeld)
}

// watchedBody is a request's body that says whether it was read from.
type watchedBody struct {
	io.ReadCloser
	read bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read = true
	return b.ReadCloser.Read(p)
}

// join relays an upgraded connection: the 101 to the client, then bytes
// both ways until either side ends. The holder's side is the transport's
// connection, which the transport cuts when the peer stops being trusted.
func (n *Network) join(w http.ResponseWriter, resp *http.Response) {
	peerConn := resp.Body.(io.ReadWriteCloser)
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	// The 101 and its headers (resp.Write would copy its Body, the
	// connection, too).
	fmt.Fprintf(buf, "HTTP/1.1 %s\r\n", resp.Status)
	resp.Header.Write(buf)
	buf.WriteString("\r\n")
	if err := buf.Flush(); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(peerConn, buf) // what the client sent, buffered ones first
		peerConn.Close()
		done <- struct{}{}
	}()
	go func() {
		io.Copy(client, peerConn)
		client.Close()
		done <- struct{}{}
	}()
	<-done
	<-done
}

// isUpgrade reports whether h asks for a protocol upgrade.
func isUpgrade(h http.Header) bool {
	return h.Get("Upgrade") != "" && headerHas(h, "Connection", "upgrade")
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// HopByHop names headers that describe one connection, never passed on.
func HopByHop(name string) bool {
	switch strings.ToLower(name) {
	case "connection", "keep-alive", "transfer-encoding", "upgrade", "content-length", "te", "trailer", "proxy-connection", "proxy-authenticate", "proxy-authorization":
		return true
	}
	return false
}

// removeHopByHop removes the hop-by-hop headers and those Connection
// names, keeping Connection and Upgrade for an upgrade and Content-Length
// always (the body is passed on as it is).
func removeHopByHop(h http.Header, upgrade bool) {
	for _, v := range h.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" && !(upgrade && strings.EqualFold(t, "upgrade")) {
				h.Del(t)
			}
		}
	}
	for k := range h {
		if HopByHop(k) && !strings.EqualFold(k, "content-length") && !(upgrade && (strings.EqualFold(k, "connection") || strings.EqualFold(k, "upgrade"))) {
			delete(h, k)
		}
	}
}
