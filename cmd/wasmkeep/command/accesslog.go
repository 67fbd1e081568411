package command

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
)

// accessLog wraps the public listener's handler (--access-log): one line a
// request once it is answered, at INFO on the node's log, with the actor
// it named, its status, its duration and the node that answered for the
// actor (x-wasmkeep-node: this one, or the holder a request was forwarded
// to). An upgrade the node accepted (or a peer did, relayed) is logged
// with status 101.
func accessLog(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status()
		if rec.code == 0 && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			status = http.StatusSwitchingProtocols // written on the hijacked connection
		}
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", status, "bytes", rec.bytes,
			"duration", time.Since(start), "remote", r.RemoteAddr}
		if actor, ok := actorOf(r.URL.Path); ok {
			attrs = append(attrs, "actor", actor)
		}
		if by := rec.Header().Get(peers.NodeHeader); by != "" {
			attrs = append(attrs, "node", by)
		}
		log.Info("request", attrs...)
	})
}

// actorOf is the class/name a path /actor/<class>/<name>[/...] names.
func actorOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/actor/")
	if !ok {
		return "", false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", false
	}
	return parts[0] + "/" + parts[1], true
}

// recorder keeps a response's status and size; Unwrap lets
// http.ResponseController and the WebSocket library reach the connection
// beneath (a hijack: an upgrade accepted here or relayed to a peer).
type recorder struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// status is the status sent; 200 when the handler wrote nothing.
func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
