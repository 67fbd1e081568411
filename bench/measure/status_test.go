package measure

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Any 2xx is an answer: an actor that creates with 201 or answers 204 is
// measured, and a 3xx, 4xx or 5xx is an error naming the request.
func TestAnyTwoHundredIsAnAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/actor/c/created":
			w.WriteHeader(http.StatusCreated)
		case "/actor/c/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/actor/c/moved":
			w.WriteHeader(http.StatusFound)
		default:
			http.Error(w, "no such actor", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := &client{http: srv.Client(), base: srv.URL}
	post := Request{Method: "POST", Path: "/actor/c/{name}"}
	for _, name := range []string{"created", "empty"} {
		if _, err := c.do(post, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, want := range map[string]string{"moved": "302 Found", "gone": "404 Not Found: no such actor"} {
		if _, err := c.do(post, name); err == nil || !strings.Contains(err.Error(), "POST /actor/c/"+name+": "+want) {
			t.Errorf("%s: %v, want an error naming the request and %q", name, err, want)
		}
	}
	// The server counts as started once the read request answers a 2xx.
	s := &server{Spawned: &Spawned{Base: srv.URL}, exited: make(chan struct{})}
	if _, err := s.awaitFirstResponse("", Request{Method: "GET", Path: "/actor/c/created"}, time.Now()); err != nil {
		t.Errorf("first response 201: %v", err)
	}
}
