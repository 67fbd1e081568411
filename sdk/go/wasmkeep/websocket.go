package wasmkeep

import (
	"strconv"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// Message is a WebSocket message: text, or binary if Binary is set.
type Message struct {
	Binary bool
	Data   []byte
}

// Text returns the message's data as a string.
func (m Message) Text() string { return string(m.Data) }

// SendError is why Send or SendBinary did not queue a message.
type SendError uint32

const (
	SendUnknownConnection SendError = abi.SendUnknownConnection // closed, or another actor's connection
	SendBackpressure      SendError = abi.SendBackpressure      // the client is not keeping up: the message was dropped
)

func (e SendError) Error() string {
	switch e {
	case SendUnknownConnection:
		return "websocket: unknown connection"
	case SendBackpressure:
		return "websocket: backpressure, message dropped"
	}
	return "websocket: send error " + strconv.Itoa(int(e))
}

var (
	wsOpenHook    func(conn uint64, path string) error
	wsMessageHook func(conn uint64, msg Message)
	wsCloseHook   func(conn uint64, code int, reason string)
)

// OnWebSocketOpen sets f to run when a client upgrades a GET on the actor's
// path (the part after the actor's name, with its query), before it is
// answered: an error refuses the socket, closed with code 1008 and the error
// as reason. Without it the actor refuses WebSockets. Call it from an init
// function.
func OnWebSocketOpen(f func(conn uint64, path string) error) {
	if wsOpenHook != nil {
		panic("wasmkeep: OnWebSocketOpen called twice")
	}
	wsOpenHook = f
}

// OnWebSocketMessage sets f to run for each message a client sends. Call it
// from an init function.
func OnWebSocketMessage(f func(conn uint64, msg Message)) {
	if wsMessageHook != nil {
		panic("wasmkeep: OnWebSocketMessage called twice")
	}
	wsMessageHook = f
}

// OnWebSocketClose sets f to run when a connection closed: by the client, by
// CloseSocket, or by the host. Call it from an init function.
func OnWebSocketClose(f func(conn uint64, code int, reason string)) {
	if wsCloseHook != nil {
		panic("wasmkeep: OnWebSocketClose called twice")
	}
	wsCloseHook = f
}
