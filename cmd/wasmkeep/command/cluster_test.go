package command

import (
	"net"
	"testing"
)

// The default --advertise names the port bound, keeping --listen's host.
func TestBoundURL(t *testing.T) {
	for _, c := range []struct{ listen, bound, want string }{
		{"127.0.0.1:0", "127.0.0.1:40123", "http://127.0.0.1:40123"},
		{"localhost:0", "127.0.0.1:40123", "http://localhost:40123"},
		{":8080", "[::]:8080", "http://:8080"},
		{"[::1]:0", "[::1]:40123", "http://[::1]:40123"},
	} {
		bound, err := net.ResolveTCPAddr("tcp", c.bound)
		if err != nil {
			t.Fatal(err)
		}
		if got := boundURL(c.listen, bound); got != c.want {
			t.Errorf("boundURL(%q, %s) = %q, want %q", c.listen, c.bound, got, c.want)
		}
	}
}
