//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// The move rows (issue 28's benchmark; book ADR 0017, ADR 1052): on a
// seventh cluster node a takes c.moves probe actors (one durable write
// each), then moves each to b in turn, `wasmkeep actor move
// default/default/probe/NAME --to b`, while two clients write unique
// tokens to it (POST /token, exec-durable), one through a and one through
// c, every 2 to 5 ms. Each move comes after a random pause of up to
// followJitter, more than a lease period: a node acts on move requests
// once a period, and moves one after another would lock onto its phase.
// The times are in milliseconds (a move's gap is tens to hundreds of them,
// below the CSV's 0.1 s):
//   - move_unavailable_*: from the command's return to the first 200
//     answered by b (x-wasmkeep-node): the wait for a's pass, then the
//     hand-over and the take;
//   - move_gap_*: the longest time between two successful answers (either
//     client) around each move: how long its clients could not write;
//   - move_requests, move_non200 (answers not 200: a 503 with Retry-After
//     while a hands the actor over), move_failed (no answer);
//   - move_lost_writes: acknowledged tokens missing once every move is done
//     (read through c, answered by b): must be 0.
//
// With -room, as many rooms (the room guest), each with a socket opened
// through a, are moved the same way:
//   - move_room_closed_*: from the command's return to the socket's 1012;
//   - move_room_reconnect_*: to the welcome of the room on b on a socket
//     dialled through a (relayed), again every 10 ms from the close;
//   - move_room_redials: dials meanwhile that did not reach the room on b.

// moveTo runs `wasmkeep actor move` of actor CLASS/NAME (of the default
// tenant and app, an --actor node's) to node to.
func (c *config) moveTo(cl *cluster, actor string, to *node) error {
	_, err := c.wasmkeep("", "actor", "move", "default/default/"+actor, "--to", to.id, "--bucket", "file://"+cl.bucketDir)
	return err
}

// moved is what the clients saw of one move.
type moved struct {
	unavailable, gap time.Duration
	requests, failed int
	non200           map[int]int // by status
	acked            []string
}

func (c *config) moveRows(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	a, b, other := cl.nodes[0], cl.nodes[1], cl.nodes[2]
	names := make([]string, c.moves)
	for i := range names {
		names[i] = "move-" + strconv.Itoa(i)
	}
	fmt.Fprintf(stdout, "\nmoving one actor: %d probe actors held by a, each moved to b in turn under writes through a and c\n", c.moves)
	if err := forEach(names, 8, func(name string) error {
		_, err := expect("POST", probeURL(a, name, "/token?t=first"), a.id)
		return err
	}); err != nil {
		return nil, err
	}
	acked := map[string][]string{}
	var unavailable, gaps []time.Duration
	all := moved{non200: map[int]int{}}
	for _, name := range names {
		time.Sleep(rand.N(c.followJitter()))
		m, err := c.moveUnderLoad(cl, name)
		if err != nil {
			return nil, err
		}
		unavailable, gaps = append(unavailable, m.unavailable), append(gaps, m.gap)
		all.requests += m.requests
		all.failed += m.failed
		for code, n := range m.non200 {
			all.non200[code] += n
		}
		acked[name] = append(m.acked, "first")
	}

	lost := 0
	for _, name := range names {
		ans, err := do("GET", probeURL(other, name, "/tokens"))
		if err != nil || ans.code != 200 || ans.node != b.id {
			return nil, fmt.Errorf("reading probe/%s's tokens through c: %v %d from %q, want 200 from b", name, err, ans.code, ans.node)
		}
		have := map[string]bool{}
		for _, t := range strings.Fields(ans.body) {
			have[t] = true
		}
		for _, t := range acked[name] {
			if !have[t] {
				lost++
			}
		}
	}
	non200 := 0
	for _, n := range all.non200 {
		non200 += n
	}
	printTimings(stdout, "a probe's move (s)", timing{"request to the first answer from b", unavailable},
		timing{"longest gap between successful writes", gaps})
	fmt.Fprintf(stdout, "  writes: %d requests, %d not 200 (by status %v), %d failed otherwise, %d acknowledged writes lost\n",
		all.requests, non200, all.non200, all.failed, lost)
	rows := slices.Concat([]measure.Row{row("move_actors", float64(c.moves), "actors")},
		spreadIn("move_unavailable", unavailable, time.Millisecond, "ms"), spreadIn("move_gap", gaps, time.Millisecond, "ms"),
		[]measure.Row{
			row("move_requests", float64(all.requests), "requests"),
			row("move_non200", float64(non200), "requests"),
			row("move_failed", float64(all.failed), "requests"),
			row("move_lost_writes", float64(lost), "writes"),
		})
	if c.roomGuest == "" {
		return rows, nil
	}
	roomRows, err := c.roomMoves(stdout, cl)
	return append(rows, roomRows...), err
}

// moveUnderLoad moves probe actor name from a to b while two clients
// write to it, through a and c, until a moment after b first answers.
func (c *config) moveUnderLoad(cl *cluster, name string) (moved, error) {
	a, b, other := cl.nodes[0], cl.nodes[1], cl.nodes[2]
	m := moved{non200: map[int]int{}}
	var mu sync.Mutex
	var succeeded []time.Time
	var onB time.Time
	reached := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, through := range []*node{a, other} {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(2+rand.IntN(4)) * time.Millisecond):
				}
				token := through.id + strconv.Itoa(j)
				ans, err := do("POST", probeURL(through, name, "/token?t="+token))
				at := time.Now()
				mu.Lock()
				m.requests++
				switch {
				case err != nil:
					m.failed++
				case ans.code != 200:
					m.non200[ans.code]++
				default:
					m.acked = append(m.acked, token)
					succeeded = append(succeeded, at)
					if ans.node == b.id && onB.IsZero() {
						onB = at
						close(reached)
					}
				}
				mu.Unlock()
			}
		})
	}
	finish := func() {
		close(stop)
		wg.Wait()
	}
	time.Sleep(300 * time.Millisecond) // the writes under way before the move
	if err := c.moveTo(cl, "probe/"+name, b); err != nil {
		finish()
		return m, err
	}
	asked := time.Now()
	select {
	case <-reached:
	case <-time.After(time.Minute):
		finish()
		return m, fmt.Errorf("probe/%s not answered by b a minute after `actor move`%s", name, a.LogTail())
	}
	time.Sleep(300 * time.Millisecond) // the writes after it
	finish()
	m.unavailable = onB.Sub(asked)
	slices.SortFunc(succeeded, time.Time.Compare)
	for i := 1; i < len(succeeded); i++ {
		m.gap = max(m.gap, succeeded[i].Sub(succeeded[i-1]))
	}
	return m, nil
}

// roomMoves moves c.moves rooms from a to b in turn, each with a socket
// opened through a, and times its close and a new socket's welcome from b.
func (c *config) roomMoves(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	a, b := cl.nodes[0], cl.nodes[1]
	var closed, reconnected []time.Duration
	redials := 0
	for i := range c.moves {
		name := "move-room-" + strconv.Itoa(i)
		ws, holder, err := dialRoom(a, name)
		if err != nil {
			return nil, err
		}
		if holder != a.id {
			ws.CloseNow()
			return nil, fmt.Errorf("room/%s's first socket through a answered by %q, want a", name, holder)
		}
		time.Sleep(rand.N(c.followJitter()))
		if err := c.moveTo(cl, "room/"+name, b); err != nil {
			ws.CloseNow()
			return nil, err
		}
		asked := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for err == nil {
			_, _, err = ws.Read(ctx)
		}
		cancel()
		if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
			return nil, fmt.Errorf("room/%s's socket as it moved: %v, want a 1012 close%s", name, err, a.LogTail())
		}
		closed = append(closed, time.Since(asked))
		for {
			ws, holder, err := dialRoom(a, name)
			if err == nil && holder == b.id {
				reconnected = append(reconnected, time.Since(asked))
				ws.Close(websocket.StatusNormalClosure, "")
				break
			}
			if err == nil {
				ws.CloseNow()
			}
			redials++
			if time.Since(asked) > time.Minute {
				return nil, fmt.Errorf("room/%s: no socket through a reached it on b a minute after `actor move` (last: %q, %v)%s", name, holder, err, a.LogTail())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	printTimings(stdout, "a room's move (s)", timing{"request to its socket's 1012 close", closed},
		timing{"request to a new socket's welcome from b", reconnected})
	fmt.Fprintf(stdout, "  %d dials after a close did not reach the room on b\n", redials)
	return slices.Concat(spreadIn("move_room_closed", closed, time.Millisecond, "ms"), spreadIn("move_room_reconnect", reconnected, time.Millisecond, "ms"),
		[]measure.Row{row("move_room_redials", float64(redials), "dials")}), nil
}

// dialRoom opens a socket to room name through n and reads its welcome;
// holder is the node that answered for the room.
func dialRoom(n *node, name string) (ws *websocket.Conn, holder string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.URL(), "http")+"/actor/room/"+name+"/", nil)
	if err != nil {
		return nil, "", fmt.Errorf("dialling room/%s through %s: %w", name, n.id, err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || !strings.HasPrefix(string(msg), "welcome") {
		ws.CloseNow()
		return nil, "", fmt.Errorf("room/%s's welcome through %s: %q, %v", name, n.id, msg, err)
	}
	return ws, resp.Header.Get("x-wasmkeep-node"), nil
}

// timing is one line of printTimings: what was timed, and each time.
type timing struct {
	what string
	took []time.Duration
}

// printTimings prints a table of each timing's p50, p99 and max in seconds.
func printTimings(w io.Writer, title string, ts ...timing) {
	fmt.Fprintf(w, "  %-44s %7s %7s %7s\n", title, "p50", "p99", "max")
	for _, t := range ts {
		fmt.Fprintf(w, "  %-44s %7.3f %7.3f %7.3f\n", t.what, measure.Percentile(t.took, 0.5).Seconds(),
			measure.Percentile(t.took, 0.99).Seconds(), slices.Max(t.took).Seconds())
	}
}
