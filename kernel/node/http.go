package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// The request headers a guest may receive: its SDK parses all of them
// within the event's CPU budget, so they are bounded well inside it.
// Measured with the Go counter on wazero, a request at both caps runs
// within a 2 ms budget, 1,000 small headers need about 10 ms and 4,000
// more than 20 ms (8,000 failed the 50 ms); wasmtime is about five times
// faster. Apache's default is also 100 fields.
// These are the defaults of Options.MaxHeaderFields and MaxHeaderBytes
// (node.max_header_fields, node.max_header_bytes).
const (
	MaxHeaderFields = 100      // header fields, Host included
	MaxHeaderBytes  = 32 << 10 // their names and values and the request target
)

// NewServer returns an HTTP server for the node with the front door's
// limits: 30 s to send request headers, headers the size ServeHTTP accepts
// (net/http adds 4 KiB for the request line and the framing, and answers
// 431 past that), and an idle limit between kept-alive requests. ServeHTTP
// bounds the body's time (Options.BodyTimeout); the command bounds the
// connections.
func (n *Node) NewServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           n,
		ReadHeaderTimeout: 30 * time.Second,
		MaxHeaderBytes:    n.opts.MaxHeaderBytes,
		IdleTimeout:       120 * time.Second,
	}
}

// ServeHTTP routes /actor/..., /_wasmkeep/health and /ready, and every other
// path to the stateless component, if there is one.
func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n.bodyDeadline(w, r)
	switch r.URL.Path {
	case "/_wasmkeep/health":
		io.WriteString(w, "ok\n")
		return
	case "/_wasmkeep/ready":
		if !n.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
		return
	}
	if msg := n.headersOverCaps(r); msg != "" {
		http.Error(w, msg, http.StatusRequestHeaderFieldsTooLarge)
		return
	}
	route, ok, err := address.ParsePath(r.URL.EscapedPath())
	switch {
	case !ok && !strings.HasPrefix(r.URL.Path, "/_wasmkeep/"):
		if d, _ := n.deployed(); d.front != nil {
			n.serveStateless(w, r, d.front)
			return
		}
		http.NotFound(w, r)
		return
	case !ok:
		http.NotFound(w, r)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// A call from a node of another app (several apps may share a bucket)
	// is refused before its class, and before its body is read (ADR 1045);
	// only where signed calls are believed: elsewhere it is a client's.
	if n.opts.Cluster != nil && n.believesCalls(r) && callsign.OtherApp(r.Header, n.opts.App.String()) {
		if callsign.Take(r.Header) { // the book's refusal of a take for another tenant
			http.Error(w, "not this app's node", http.StatusForbidden)
			return
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "not this app's node", http.StatusServiceUnavailable)
		return
	}
	c := n.class(route.Class)
	if c == nil {
		http.Error(w, "unknown class "+strconv.Quote(route.Class), http.StatusNotFound)
		return
	}
	if cl := n.opts.Cluster; cl != nil {
		w.Header().Set(peers.NodeHeader, cl.Member.Lease.NodeID())
		if r.Header.Get(callsign.SignatureHeader) != "" && n.serveCall(w, r, c, route) {
			return
		}
	}
	// A request for an actor whose holder is suspected gone may be kept
	// (failover.go): each try places it afresh, after a wait, until it is
	// answered or the wait ends.
	k := n.keepFor(r, n.actorKey(c, route.Name))
	for {
		t, held := n.serveActor(w, r, c, route, k)
		if !held {
			k.answered(t)
			return
		}
		if outcome := k.wait(r.Context()); outcome != "" {
			refuseKept(w, outcome)
			return
		}
	}
}

// serveActor places an actor's request and answers it: forwarded to the
// holder, or run here. It answers nothing, and reports held, when k keeps
// the request because its actor's holder is suspected gone.
func (n *Node) serveActor(w http.ResponseWriter, r *http.Request, c *class, route address.Route, k *kept) (t tried, held bool) {
	// Where the actor runs comes first: the access rule may read this
	// node's storage, which only the holder's is. A request no node
	// forwarded yet may follow an owner hint; one forwarded already is
	// placed from the record, as any event run here, and so is one whose
	// hint failed untouched (forward).
	ctx := r.Context()
	if r.Header.Get(peers.ForwardedHeader) == "" {
		ctx = placement.Routed(ctx)
	}
	for err := n.place(ctx, c, route.Name); err != nil; err = n.place(r.Context(), c, route.Name) {
		var elsewhere *placement.Elsewhere
		if !errors.As(err, &elsewhere) || n.opts.Cluster == nil {
			n.refuse(w, err)
			return tried{}, false
		}
		if n.keepFrom(k, elsewhere.Owner.Node) {
			return tried{}, true
		}
		if n.forward(w, r, elsewhere) {
			return tried{sentTo: elsewhere.Owner.Node}, false
		}
	}
	if !n.allowed(w, r, c, route) {
		return tried{}, false
	}
	if websocket.IsUpgrade(r) {
		path := route.Rest
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		return n.serveWebSocket(w, r, c, route.Name, path, k)
	}
	payload, ok := n.readRequest(w, r, route.Rest)
	if !ok {
		return tried{}, false
	}
	ev := &event{ctx: r.Context(), payload: payload, reply: make(chan outcome, 1), placed: true}
	if err := n.deliver(r.Context(), c, route.Name, ev); err != nil {
		if to, ok := n.relocate(w, r, c, route.Name, err, payload); ok {
			return tried{sentTo: to}, false
		}
		n.refuse(w, err)
		return tried{}, false
	}
	select {
	case out := <-ev.reply:
		if holder, ok := suspected(out.err); ok && k.hold(holder) {
			return tried{}, true
		}
		if n.forwardUnrun(w, r, out, payload) {
			return tried{sentTo: sentTo(out.err)}, false
		}
		writeOutcome(w, out)
		return tried{ran: out.err == nil}, false
	case <-r.Context().Done():
		// The client left; a queued event will not run, a started one ends on its own.
		return tried{}, false
	}
}

// sentTo is the node an event not run here was sent on to.
func sentTo(err error) string {
	var e *placement.Elsewhere
	if errors.As(err, &e) {
		return e.Owner.Node
	}
	return ""
}

// allowed applies the class's access rule to an outside request placed
// here, this node's or the holder's (a forwarded request is checked again
// where it runs), or answers it: 403 for an internal class, 404 for a name
// an existing class does not let it create and that does not exist, 503
// with Retry-After when whether it exists cannot be told now. A refused
// request creates nothing.
func (n *Node) allowed(w http.ResponseWriter, r *http.Request, c *class, route address.Route) bool {
	if c.access.Mode == access.Internal {
		n.metrics.Refused(metrics.RefusedAccess)
		http.Error(w, "class "+strconv.Quote(route.Class)+" is internal: outside requests are refused", http.StatusForbidden)
		return false
	}
	if c.access.AllowsCreate(route.Name) {
		return true
	}
	found, err := n.exists(r.Context(), c, route.Name)
	switch {
	case err != nil && r.Context().Err() != nil: // the client left
	case err != nil:
		n.metrics.Refused(metrics.RefusedUnavailable)
		n.log.Warn("whether the actor exists could not be checked in the bucket", "actor", n.actorKey(c, route.Name), "err", err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "whether the actor exists cannot be checked now, retry", http.StatusServiceUnavailable)
	case !found:
		n.metrics.Refused(metrics.RefusedAccess)
		http.Error(w, "unknown actor "+strconv.Quote(route.Name), http.StatusNotFound)
	}
	return err == nil && found
}

// bodyDeadline gives r's body Options.BodyTimeout to arrive, on whichever
// path reads it (an event, the stateless component, a forward): a client
// that trickles it holds its connection no longer. net/http lifts the
// deadline once the body is read whole (it then reads on for the client's
// leaving), and sets its own for the connection's next request. Not
// http.Server.ReadTimeout: that one would stay on through the event.
func (n *Node) bodyDeadline(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(n.opts.BodyTimeout))
}

// headersOverCaps says how r's headers exceed Options.MaxHeaderFields or
// MaxHeaderBytes, or returns "".
func (n *Node) headersOverCaps(r *http.Request) string {
	fields, size := 1, len("Host")+len(r.Host)+len(r.RequestURI) // Host is not in r.Header
	for k, vs := range r.Header {
		fields += len(vs)
		for _, v := range vs {
			size += len(k) + len(v)
		}
	}
	switch {
	case fields > n.opts.MaxHeaderFields:
		return fmt.Sprintf("the request has %d header fields; at most %d reach an actor", fields, n.opts.MaxHeaderFields)
	case size > n.opts.MaxHeaderBytes:
		return fmt.Sprintf("the request's headers and target are %d bytes; at most %d reach an actor", size, n.opts.MaxHeaderBytes)
	}
	return ""
}

// refuse answers and counts a request that could not be delivered; false
// when it wrote nothing (an error it does not know: the client left while
// waiting for admission).
func (n *Node) refuse(w http.ResponseWriter, err error) bool {
	n.countRefusal(err)
	var elsewhere *placement.Elsewhere
	var unplaced *placement.Unplaced
	switch {
	case errors.As(err, &elsewhere): // not run here; forwarding will answer this
		w.Header().Set("Retry-After", "1")
		http.Error(w, elsewhere.Error(), http.StatusServiceUnavailable)
	case errors.Is(err, placement.ErrNoTaker):
		w.Header().Set("Retry-After", "1")
		http.Error(w, "this node takes no actor now and no other node of the app does, retry", http.StatusServiceUnavailable)
	case errors.As(err, &unplaced):
		n.log.Warn("actor not placed", "err", err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the actor's owner is not known now, retry", http.StatusServiceUnavailable)
	case errors.Is(err, errQueueFull):
		http.Error(w, "too many requests for this actor", http.StatusTooManyRequests)
	case errors.Is(err, errCapacity):
		w.Header().Set("Retry-After", "1")
		http.Error(w, "server at capacity, retry", http.StatusServiceUnavailable)
	case errors.Is(err, errHandingOver):
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error()+", retry", http.StatusServiceUnavailable)
	case errors.Is(err, errStopping): // another node, or this one restarted, may answer the retry
		w.Header().Set("Retry-After", "1")
		http.Error(w, "server is stopping, retry", http.StatusServiceUnavailable)
	default:
		return false
	}
	return true
}

// readRequest encodes r for the guest with path (escaped, without the
// query), or answers the client and returns false.
func (n *Node) readRequest(w http.ResponseWriter, r *http.Request, path string) ([]byte, bool) {
	if r.ContentLength > n.opts.MaxBodyBytes {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return nil, false
	}
	payload, err := n.encodeRequest(r, path)
	if err != nil {
		switch {
		case errors.Is(err, errBodyTooLarge):
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		case errors.Is(err, os.ErrDeadlineExceeded):
			http.Error(w, fmt.Sprintf("request body not received within %v", n.opts.BodyTimeout), http.StatusRequestTimeout)
		default:
			http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
		}
		return nil, false
	}
	return payload, true
}

var errBodyTooLarge = errors.New("request body too large")

// encodeRequest builds the abi.Request the guest receives, reading the body
// straight into the payload.
func (n *Node) encodeRequest(r *http.Request, path string) ([]byte, error) {
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	size := 64 + len(path)
	for k, vs := range r.Header {
		for _, v := range vs {
			size += 8 + len(k) + len(v)
		}
	}
	if r.ContentLength > 0 {
		size += int(r.ContentLength)
	}
	b := make([]byte, 0, size)
	b = abi.AppendString(b, r.Method)
	b = abi.AppendString(b, path)
	count, countAt := uint32(0), len(b)
	b = abi.AppendU32(b, 0)
	eachGuestHeader(r, false, func(name, value string) {
		b = abi.AppendString(abi.AppendString(b, name), value)
		count++
	})
	binary.LittleEndian.PutUint32(b[countAt:], count)
	bodyAt := len(b)
	b = abi.AppendU32(b, 0)
	b, err := readBody(b, r.Body, n.opts.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(b[bodyAt:], uint32(len(b)-bodyAt-4))
	return b, nil
}

// readBody appends at most limit bytes of body to b.
func readBody(b []byte, body io.Reader, limit int64) ([]byte, error) {
	start := len(b)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		m, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if int64(len(b)-start) > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// outcomeStatus is the body and status a client gets for an event that
// failed with err: never host details.
func outcomeStatus(err error) (msg string, code int) {
	var f *failure
	var elsewhere *placement.Elsewhere
	msg, code = "internal error", http.StatusInternalServerError
	switch {
	case errors.As(err, &elsewhere):
		msg, code = elsewhere.Error(), http.StatusServiceUnavailable
	case errors.As(err, &f):
		msg = f.public
		switch {
		case f.status != 0:
			code = f.status
		case f.retry:
			code = http.StatusServiceUnavailable
		}
	}
	return msg, code
}

// writeOutcome answers the client with how its event ended.
func writeOutcome(w http.ResponseWriter, out outcome) {
	if out.err != nil {
		msg, code := outcomeStatus(out.err)
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, msg, code)
		return
	}
	h := w.Header()
	for _, kv := range out.resp.Headers {
		if peers.HopByHop(kv.Name) || callsign.HostOwned(kv.Name) { // only a node says those
			continue
		}
		h.Add(kv.Name, kv.Value)
	}
	h.Set("Content-Length", strconv.Itoa(len(out.resp.Body)))
	w.WriteHeader(out.resp.Status)
	w.Write(out.resp.Body)
}
