package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
)

// The key-value contract (issue 17, items 1 and 4): the same requests and
// answers from the Go client (testdata/guests/kvclient) and the C client
// (testdata/guests/ckvclient), against the real shard class of
// examples/jobs/kv, on a real node.

func kvClientGuests() []sdkGuest {
	return []sdkGuest{
		{"go", func(t testing.TB) string { return buildGuest(t, "cmd/wasmkeep/testdata/guests/kvclient", "") }},
		{"c", func(t testing.TB) string { return buildCGuest(t, "cmd/wasmkeep/testdata/guests/ckvclient") }},
	}
}

func TestKVContract(t *testing.T) {
	for _, g := range kvClientGuests() {
		t.Run(g.sdk, func(t *testing.T) {
			t.Parallel()
			client := g.build(t)
			t.Run("shard", func(t *testing.T) { kvContract(t, client) })
			t.Run("expiry", func(t *testing.T) { kvExpiryContract(t, client) })
		})
	}
}

// kvClient sends requests to the client actor client/<name>.
type kvClient struct {
	t *testing.T
	n *testNode
}

// do sends method to client/<actor><route>, with query parameters as
// pairs, and returns the answer, which must be a 200.
func (c kvClient) do(method, actor, route, body string, params ...string) string {
	c.t.Helper()
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	path := "/actor/client/" + actor + route
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	code, got := c.n.do(method, path, body)
	if code != 200 {
		c.t.Fatalf("%s %s: %d %q\nnode log:\n%s", method, path, code, got, c.n.log.String())
	}
	return got
}

func (c kvClient) expect(method, actor, route, body, want string, params ...string) {
	c.t.Helper()
	if got := c.do(method, actor, route, body, params...); got != want {
		c.t.Fatalf("%s %s%s %v: got %q, want %q", method, actor, route, params, got, want)
	}
}

// version parses a put's answer.
func (c kvClient) version(answer string) uint64 {
	c.t.Helper()
	v, err := strconv.ParseUint(strings.TrimSuffix(answer, "\n"), 10, 64)
	if err != nil {
		c.t.Fatalf("want a version, got %q", answer)
	}
	return v
}

func (c kvClient) put(actor, key, value string, params ...string) uint64 {
	c.t.Helper()
	return c.version(c.do("POST", actor, "/put", value, append([]string{"key", key}, params...)...))
}

func entry(version uint64, value string) string { return fmt.Sprintf("%d 0 %s\n", version, value) }

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func kvContract(t *testing.T, client string) {
	n := startNode(t, node.Options{
		Classes: map[string]string{"kv": buildGuest(t, "examples/jobs/kv", ""), "client": client},
		Access:  map[string]access.Access{"kv": mustAccess(t, "internal")},
	})
	c := kvClient{t, n}

	// Too long a key fails before any call: no shard exists afterwards.
	long := strings.Repeat("k", kv.MaxKeyLen+1)
	c.expect("GET", "a", "/get", "", "error key-too-long\n", "key", long)
	c.expect("POST", "a", "/put", "x", "error key-too-long\n", "key", long)
	c.expect("POST", "a", "/delete", "", "error key-too-long\n", "key", long)
	c.expect("GET", "a", "/list", "", "error key-too-long\n", "prefix", long)
	for i := range 4 {
		if ok, err := n.storage.Exists(context.Background(), n.dataDir, abi.Address{Tenant: "default", Class: "kv", Name: "shard-" + strconv.Itoa(i)}); ok || err != nil {
			t.Fatalf("kv/shard-%d exists after calls with too long a key: %v %v", i, ok, err)
		}
	}
	longest := strings.Repeat("k", kv.MaxKeyLen)
	c.put("a", longest, "longest")
	c.expect("GET", "a", "/get", "", entry(1, "longest"), "key", longest) // the first version of its shard

	// Put, get, versions.
	c.expect("GET", "a", "/get", "", "absent\n", "key", "user:42")
	v1 := c.put("a", "user:42", "Ada")
	c.expect("GET", "a", "/get", "", entry(v1, "Ada"), "key", "user:42")
	v2 := c.put("a", "user:42", "Ada L.")
	v3 := c.put("a", "user:42", "local", "local", "1")
	if !(v1 < v2 && v2 < v3) {
		t.Fatalf("versions %d, %d, %d do not grow", v1, v2, v3)
	}
	c.expect("GET", "b", "/get", "", entry(v3, "local"), "key", "user:42") // another caller sees it
	c.expect("GET", "b", "/fresh", "", entry(v3, "local"), "key", "user:42")

	// Delete; versions are not reused after it.
	c.expect("POST", "a", "/delete", "", "deleted\n", "key", "user:42")
	c.expect("GET", "a", "/get", "", "absent\n", "key", "user:42")
	c.expect("POST", "a", "/delete", "", "absent\n", "key", "user:42")
	v4 := c.put("a", "user:42", "again")
	if v4 <= v3 {
		t.Fatalf("version %d after a delete, not above %d", v4, v3)
	}
	c.expect("POST", "a", "/cas", "x", "error conflict\n", "key", "user:42", "expect", u(v3))

	// Compare-and-set: absent, version, conflicts; delete-if.
	c1 := c.version(c.do("POST", "a", "/cas", "Bob", "key", "user:43", "expect", "absent"))
	c.expect("POST", "a", "/cas", "Bob", "error conflict\n", "key", "user:43", "expect", "absent")
	c2 := c.version(c.do("POST", "a", "/cas", "Bob B.", "key", "user:43", "expect", u(c1)))
	c.expect("POST", "a", "/cas", "Bob C.", "error conflict\n", "key", "user:43", "expect", u(c1))
	c.expect("POST", "a", "/put", "Bob D.", "error conflict\n", "key", "user:43", "expect", u(c1))
	c.expect("GET", "a", "/get", "", entry(c2, "Bob B."), "key", "user:43")
	c.expect("POST", "a", "/delete", "", "error conflict\n", "key", "user:43", "expect", u(c1))
	c.expect("POST", "a", "/delete", "", "error conflict\n", "key", "user:43", "expect", "absent")
	c.expect("POST", "a", "/delete", "", "deleted\n", "key", "user:43", "expect", u(c2))
	c.expect("POST", "a", "/delete", "", "absent\n", "key", "user:43", "expect", "absent")
	c.expect("POST", "a", "/delete", "", "error conflict\n", "key", "user:43", "expect", u(c2))
	ve := c.put("a", "empty", "") // an empty value is a value
	c.expect("POST", "a", "/cas", "", "error conflict\n", "key", "empty", "expect", "absent")
	c.expect("GET", "a", "/get", "", entry(ve, ""), "key", "empty")

	kvList(c)
	kvReadCache(c)

	// Compare-and-set under 20 concurrent writers: 20 outside requests to
	// 20 client actors, each from the same expected version.
	race := c.put("a", "race", "start")
	answers := make([]string, 20)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, answers[i] = n.do("POST", "/actor/client/w"+strconv.Itoa(i)+"/cas?key=race&expect="+u(race), "w"+strconv.Itoa(i))
		}()
	}
	wg.Wait()
	winner := -1
	for i, a := range answers {
		switch {
		case a == "error conflict\n":
		case winner < 0 && a == u(race+1)+"\n":
			winner = i
		default:
			t.Errorf("writer %d: %q, want the only winner's version %d or a conflict", i, a, race+1)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer won: %q", answers)
	}
	c.expect("GET", "a", "/get", "", entry(race+1, "w"+strconv.Itoa(winner)), "key", "race")

	// Outside requests to a shard: refused by --access kv=internal before
	// any actor (kvExpiryContract checks the shard's own 403).
	const refused = "class \"kv\" is internal: outside requests are refused\n"
	n.expect("POST", "/actor/kv/shard-0/wasmkeep-kv/v1/get", "", 403, refused)
}

// kvList pages through a prefix's keys, spread over every shard, in byte
// order.
func kvList(c kvClient) {
	t := c.t
	want := []string{"p:\xc3\xa9", "p:~"}
	for i := range 12 {
		want = append(want, fmt.Sprintf("p:%02d", i))
	}
	shards := map[int]bool{}
	for _, k := range want {
		c.put("a", k, "v")
		shards[kv.ShardOf(k, 4)] = true
	}
	if len(shards) != 4 {
		t.Fatalf("the keys reach shards %v, not all 4", shards)
	}
	for _, k := range []string{"p", "o:z", "q:0", "P:1"} {
		c.put("a", k, "not listed")
	}
	slices.Sort(want)
	var got []string
	after := []string{}
	for page := 0; ; page++ {
		out := c.do("GET", "a", "/list", "", append([]string{"prefix", "p:", "limit", "5"}, after...)...)
		if out == "" {
			break
		}
		keys := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(keys) > 5 || page > 3 {
			t.Fatalf("page %d: %q", page, out)
		}
		got = append(got, keys...)
		after = []string{"after", keys[len(keys)-1]}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
	c.expect("GET", "a", "/list", "", strings.Join(want[:3], "\n")+"\n", "prefix", "p:", "limit", "3")
	c.expect("GET", "a", "/list", "", "p:~\np:\xc3\xa9\n", "prefix", "p:", "after", "p:11")
	c.expect("GET", "a", "/list", "", "P:1\n", "prefix", "P")
}

// kvReadCache: the client under /cached/ keeps what it read for 500 ms;
// its own writes update it, /fresh skips it.
func kvReadCache(c kvClient) {
	t := c.t
	mine := c.version(c.do("POST", "a", "/cached/put", "mine", "key", "rc"))
	start := time.Now()
	v := c.put("b", "rc", "theirs")
	cachedAnswer := c.do("GET", "a", "/cached/get", "", "key", "rc")
	if time.Since(start) < 400*time.Millisecond && cachedAnswer != entry(mine, "mine") {
		t.Errorf("cached get after the caller's own put: %q, want its own write", cachedAnswer)
	}
	c.expect("GET", "a", "/cached/fresh", "", entry(v, "theirs"), "key", "rc")
	start = time.Now()
	v2 := c.put("b", "rc", "third")
	cachedAnswer = c.do("GET", "a", "/cached/get", "", "key", "rc")
	if time.Since(start) < 400*time.Millisecond && cachedAnswer != entry(v, "theirs") {
		t.Errorf("cached get within its age: %q, want the value /fresh read", cachedAnswer)
	}
	c.expect("GET", "a", "/get", "", entry(v2, "third"), "key", "rc") // the plain client has no cache
	time.Sleep(time.Until(start.Add(550 * time.Millisecond)))
	c.expect("GET", "a", "/cached/get", "", entry(v2, "third"), "key", "rc")
	c.do("POST", "a", "/cached/delete", "", "key", "rc")
	c.put("b", "rc", "fourth")
	if a := c.do("GET", "a", "/cached/get", "", "key", "rc"); time.Since(start) < 950*time.Millisecond && a != "absent\n" {
		t.Errorf("cached get after the caller's own delete: %q, want absent", a)
	}
}

// kvExpiryContract: keys with a TTL read as absent once expired, and the
// shard's alarm deletes their rows. The shard is testdata/guests/kvshard,
// the SDK's pieces with GET /rows of its own.
func kvExpiryContract(t *testing.T, client string) {
	n := startNode(t, node.Options{
		Classes: map[string]string{"kv": buildGuest(t, "cmd/wasmkeep/testdata/guests/kvshard", ""), "client": client},
	})
	c := kvClient{t, n}
	n.expect("POST", "/actor/kv/shard-0/wasmkeep-kv/v1/get", "", 403, "forbidden: a key-value shard answers only calls from other actors\n")
	n.expect("GET", "/actor/kv/shard-0/wasmkeep-kv/v1/get", "", 403, "forbidden: a key-value shard answers only calls from other actors\n")

	c.expect("GET", "denied", "/get", "", "error refused 403\n", "key", "k") // kv.HandleAllowing

	// Keys without a TTL, spread over the shards, and keys with one.
	kept := []string{"t:kept"}
	for i := range 8 {
		kept = append(kept, "h:"+strconv.Itoa(i))
	}
	for _, k := range kept {
		c.put("a", k, "kept")
	}
	const ttl = 1000
	start := time.Now()
	keys := []string{"t:0", "t:1", "t:2", "t:3", "t:4", "t:5"}
	for _, k := range keys {
		c.put("a", k, "short-lived", "ttl", strconv.Itoa(ttl))
	}
	got := strings.Fields(c.do("GET", "a", "/get", "", "key", "t:0"))
	if exp, _ := strconv.ParseInt(got[1], 10, 64); len(got) != 3 || exp < start.UnixMilli()+ttl || exp > time.Now().UnixMilli()+ttl {
		t.Fatalf("get of a key with a TTL: %q, want it to expire %d ms after its put", got, ttl)
	}
	list := c.do("GET", "a", "/list", "", "prefix", "t:")
	if time.Since(start) < ttl*time.Millisecond*8/10 && list != strings.Join(keys, "\n")+"\nt:kept\n" {
		t.Errorf("list before the TTL: %q", list)
	}
	time.Sleep((ttl + 100) * time.Millisecond) // past the last key's expiry
	for _, k := range keys {
		c.expect("GET", "a", "/get", "", "absent\n", "key", k)
	}
	c.expect("GET", "a", "/list", "", "t:kept\n", "prefix", "t:")
	rows := func() (total int) {
		for _, r := range rowsOf(t, n) {
			total += r
		}
		return total
	}
	waitFor(t, 10*time.Second, "the alarms to delete the expired rows", func() bool { return rows() == len(kept) })
	// Each key is in the shard FNV-1a 64 picks, whatever the client's SDK.
	want := make([]int, 4)
	for _, k := range kept {
		want[kv.ShardOf(k, 4)]++
	}
	if got := rowsOf(t, n); !slices.Equal(got, want) {
		t.Fatalf("rows per shard: %v, want %v", got, want)
	}
	if a := c.do("GET", "a", "/get", "", "key", "t:kept"); !strings.HasSuffix(a, " 0 kept\n") {
		t.Fatalf("the key without a TTL: %q", a)
	}

	// 1,200 expired rows go in three alarms, 500 at a time: each full
	// batch sets the alarm at once for the next, the last sets none.
	alarms := func() float64 { return n.metric(`wasmkeep_events_total{class="kv",kind="alarm",outcome="ok"}`) }
	before := alarms()
	n.expect("POST", "/actor/kv/batch/fill?n=1200", "", 200, "")
	waitFor(t, 10*time.Second, "the alarms to delete 1,200 rows", func() bool {
		_, b := n.do("GET", "/actor/kv/batch/rows", "")
		return b == "0\n"
	})
	time.Sleep(200 * time.Millisecond) // a fourth alarm, if one were set, would fire now
	if got := alarms() - before; got != 3 {
		t.Errorf("%v alarms deleted 1,200 expired rows, want 3", got)
	}
}

// rowsOf is the number of rows in each of the 4 kvshard shards' table.
func rowsOf(t *testing.T, n *testNode) []int {
	t.Helper()
	rows := make([]int, 4)
	for i := range rows {
		_, b := n.do("GET", "/actor/kv/shard-"+strconv.Itoa(i)+"/rows", "")
		r, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil {
			t.Fatalf("rows of shard %d: %q", i, b)
		}
		rows[i] = r
	}
	return rows
}
