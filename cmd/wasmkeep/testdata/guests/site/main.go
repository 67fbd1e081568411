//go:build wasip1

// site is the tests' stateless component: it answers the path it got, and
// each path tries one rule of the stateless component.
package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// requests lives in the instance: it stays at 1 if each request gets a
// fresh one.
var requests int

func init() {
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		requests++
		switch r.URL.Path {
		case "/count":
			fmt.Fprintf(w, "%d", requests)
		case "/sql":
			_, err := wasmkeep.Exec("CREATE TABLE t (v)")
			var se *wasmkeep.SQLError
			if errors.As(err, &se) {
				fmt.Fprintf(w, "%s: %s", se.Kind, se.Message)
				return
			}
			fmt.Fprintf(w, "unexpected: %v", err)
		case "/call":
			req, _ := wasmkeep.NewRequest("GET", "/hits", nil)
			_, err := wasmkeep.Call("probe/a", req)
			fmt.Fprintf(w, "%v", err)
		case "/alarm":
			wasmkeep.SetAlarm(1)
		case "/spin":
			for {
			}
		case "/log":
			fmt.Println("hello from the site")
		default:
			var hdr []string
			for k := range r.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-") {
					hdr = append(hdr, k)
				}
			}
			slices.Sort(hdr)
			fmt.Fprintf(w, "%s %s %v", r.Method, r.URL.RequestURI(), hdr)
		}
	})
}

func main() {}
