//go:build wasip1

// Kvclient drives sdk/go/kv's Client over HTTP, for the key-value contract
// test; guests/ckvclient is the same actor in C, with the same routes and
// answers. It uses the shards kv/shard-0 .. kv/shard-3; the routes under
// /cached/ go through a client with a read cache of 500 ms.
//
//	POST /put?key=K[&ttl=MS][&local=1][&expect=absent|V]  body: the value  → "V\n"
//	POST /cas?key=K&expect=absent|V                       body: the value  → "V\n"
//	GET  /get?key=K, /fresh?key=K                          → "V EXPIRES VALUE\n" or "absent\n"
//	POST /delete?key=K[&expect=absent|V]                   → "deleted\n" or "absent\n"
//	GET  /list?prefix=P[&after=A][&limit=N]                → one key a line
//
// A failure answers 200 with "error KIND\n" ("error refused STATUS\n").
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

var (
	store  = kv.New("kv", 4)
	cached = store.WithReadCache(500)
)

func init() { wasmkeep.HandleFunc(serve) }

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	c, path := store, r.URL.Path
	if rest, ok := strings.CutPrefix(path, "/cached"); ok {
		c, path = cached, rest
	}
	q := r.URL.Query()
	key := q.Get("key")
	expect, err := parseExpect(q)
	if err != nil {
		wasmkeep.Error(w, err.Error(), 400)
		return
	}
	var out string
	switch path {
	case "/put", "/cas":
		o := kv.PutOptions{Local: q.Get("local") == "1", Expect: expect}
		if t := q.Get("ttl"); t != "" {
			o.TTLMs, _ = strconv.ParseInt(t, 10, 64)
		}
		var v uint64
		if path == "/cas" {
			v, err = c.CompareAndSet(key, expect, r.Body)
		} else {
			v, err = c.PutWith(key, r.Body, o)
		}
		out = strconv.FormatUint(v, 10) + "\n"
	case "/get", "/fresh":
		get := c.Get
		if path == "/fresh" {
			get = c.GetFresh
		}
		var e *kv.Entry
		if e, err = get(key); e == nil {
			out = "absent\n"
		} else {
			out = strconv.FormatUint(e.Version, 10) + " " + strconv.FormatInt(e.ExpiresAt, 10) + " " + string(e.Value) + "\n"
		}
	case "/delete":
		var deleted bool
		if deleted, err = c.DeleteIf(key, expect); deleted {
			out = "deleted\n"
		} else {
			out = "absent\n"
		}
	case "/list":
		limit, _ := strconv.Atoi(q.Get("limit"))
		var keys []string
		if q.Has("after") {
			keys, err = c.ListAfter(q.Get("prefix"), q.Get("after"), limit)
		} else {
			keys, err = c.List(q.Get("prefix"), limit)
		}
		for _, k := range keys {
			out += k + "\n"
		}
	default:
		wasmkeep.Error(w, "no such route", 404)
		return
	}
	if err != nil {
		var e *kv.Error
		if !errors.As(err, &e) {
			out = "error " + err.Error() + "\n"
		} else if e.Kind == kv.Refused {
			out = "error refused " + strconv.Itoa(e.Status) + "\n"
		} else {
			out = "error " + e.Kind.String() + "\n"
		}
	}
	w.Write([]byte(out))
}

func parseExpect(q wasmkeep.Values) (kv.Expect, error) {
	switch s := q.Get("expect"); s {
	case "":
		return kv.Any(), nil
	case "absent":
		return kv.Absent(), nil
	default:
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return kv.Any(), errors.New("expect: absent or a version")
		}
		return kv.Version(v), nil
	}
}

func main() {}
