//go:build wasip1

package wasmkeep

import (
	"encoding/binary"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

//go:wasmimport wasmkeep ws_send
func wsSend(conn uint64, kind uint32, data unsafe.Pointer, n uint32) uint32

//go:wasmimport wasmkeep ws_close
func wsClose(conn uint64, code uint32, reason string)

//go:wasmimport wasmkeep ws_connections
func wsConnections(out unsafe.Pointer, outCap uint32) int32

//go:wasmexport wasmkeep_on_websocket_open
func onWebSocketOpen(conn uint64, n uint32) int32 {
	defer release()
	path := string(pending(int(n)))
	if wsOpenHook == nil {
		return done("this actor accepts no WebSockets")
	}
	return done(run(func() error { return wsOpenHook(conn, path) }))
}

//go:wasmexport wasmkeep_on_websocket_message
func onWebSocketMessage(conn uint64, n uint32) int32 {
	defer release()
	b := pending(int(n))
	if wsMessageHook == nil || len(b) == 0 {
		return 0
	}
	msg := Message{Binary: abi.MessageKind(b[0]) == abi.MessageBinary, Data: b[1:]}
	return done(run(func() error { wsMessageHook(conn, msg); return nil }))
}

//go:wasmexport wasmkeep_on_websocket_close
func onWebSocketClose(conn uint64, code int32, n uint32) int32 {
	defer release()
	reason := string(pending(int(n)))
	if wsCloseHook == nil {
		return 0
	}
	return done(run(func() error { wsCloseHook(conn, int(code), reason); return nil }))
}

// Send queues a text message on conn; it never waits for the client.
func Send(conn uint64, text string) error {
	return send(conn, abi.MessageText, unsafe.Pointer(unsafe.StringData(text)), len(text))
}

// SendBinary queues a binary message on conn.
func SendBinary(conn uint64, data []byte) error {
	return send(conn, abi.MessageBinary, ptr(data), len(data))
}

func send(conn uint64, kind abi.MessageKind, p unsafe.Pointer, n int) error {
	if code := wsSend(conn, uint32(kind), p, uint32(n)); code != abi.SendOK {
		return SendError(code)
	}
	return nil
}

// CloseSocket closes conn with code (1000, or 3000-4999) and reason, after
// the messages already queued on it. It leaves Connections at once.
func CloseSocket(conn uint64, code int, reason string) { wsClose(conn, uint32(code), reason) }

// Connections returns this actor's open connections, oldest first.
func Connections() []uint64 {
	o, oc := out()
	b, _ := result(wsConnections(o, oc), false)
	if len(b) < 4 {
		return nil
	}
	count := binary.LittleEndian.Uint32(b)
	ids := make([]uint64, 0, count)
	for i := range int(count) {
		ids = append(ids, binary.LittleEndian.Uint64(b[4+8*i:]))
	}
	return ids
}
