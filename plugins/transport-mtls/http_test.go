package mtlstransport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

type connKey struct{}

// HTTP/1.1 runs over the transport as the kernel will run it: an
// http.Server on the listener that names each request's peer with PeerOf
// (the connection from ConnContext), and an http.Transport whose
// DialContext is the transport's Dial to one peer, over http:// URLs (the
// TLS is the transport's). A response streaming when the server drops the
// client from its trusted set ends at once on both sides, as a relayed
// WebSocket must; the client's next request is refused.
func TestHTTPOverTransport(t *testing.T) {
	a, err := Open(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.Trust(map[transport.NodeID]string{"b": b.Pin()})
	b.Trust(map[transport.NodeID]string{"a": a.Pin()})

	l, err := b.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	streamEnded := make(chan error, 1)
	srv := &http.Server{
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := b.PeerOf(r.Context().Value(connKey{}).(net.Conn))
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if r.URL.Path != "/stream" {
				fmt.Fprintf(w, "hello %s", p.Node)
				return
			}
			// A stream that writes until its connection is cut.
			for {
				if _, err := fmt.Fprintln(w, "tick"); err != nil {
					streamEnded <- err
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					streamEnded <- r.Context().Err()
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}),
	}
	go srv.Serve(l)
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return a.Dial(ctx, "b", addr) },
	}}
	base := "http://" + l.Addr().String()
	resp, err := client.Get(base + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello a" {
		t.Fatalf("GET /hello: %s %q", resp.Status, body)
	}

	resp, err = client.Get(base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != "tick" {
		t.Fatalf("the stream: %q, %v", lines.Text(), lines.Err())
	}
	read := make(chan error, 1)
	go func() {
		for lines.Scan() {
		}
		read <- lines.Err()
	}()
	b.Trust(map[transport.NodeID]string{}) // b drops a
	for what, ch := range map[string]chan error{"the client's read": read, "the server's stream": streamEnded} {
		select {
		case err := <-ch:
			t.Logf("%s ended: %v", what, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still going 5 s after b dropped a", what)
		}
	}
	if resp, err := client.Get(base + "/hello"); err == nil {
		resp.Body.Close()
		t.Fatalf("a request after b dropped a: %s, want refused", resp.Status)
	}
}
