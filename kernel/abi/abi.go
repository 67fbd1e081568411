// Package abi holds the WasmKeep guest ABI, version 1: the names of the
// functions a guest imports from the host and exports to it, and the byte
// encoding of every value that crosses the boundary. docs/abi.md is the
// specification; this package is its one implementation, used by the host
// (kernel) and by the Go guest SDK alike, so the two cannot drift apart.
//
// The package imports nothing but the standard library's encoding helpers so
// that it compiles for GOOS=wasip1 and stays small inside guests.
package abi

// Version is the ABI major version this package implements. A module
// declares the version it was built for by exporting a function named
// VersionExport (wasmkeep_abi_v1); the host refuses a module that declares
// none or another one.
const Version = 1

// HostModule is the import module name of every WasmKeep host function.
const HostModule = "wasmkeep"

// VersionExport is the export that declares ABI v1. It takes and returns
// nothing and is never called.
const VersionExport = "wasmkeep_abi_v1"

// Guest exports (hooks). Every hook returns an i32: 0 for success, anything
// else for failure, with the message given by HostHookError beforehand.
const (
	ExportMemory     = "memory"
	ExportInitialize = "_initialize" // reactor start function, run once after instantiation
	ExportOnInit     = "wasmkeep_on_init"
	// wasmkeep_on_request(len i32) -> i32; the encoded Request is pending.
	ExportOnRequest = "wasmkeep_on_request"
	ExportOnAlarm   = "wasmkeep_on_alarm"
	// wasmkeep_on_websocket_open(conn i64, len i32) -> i32; the path is pending.
	ExportOnWebSocketOpen = "wasmkeep_on_websocket_open"
	// wasmkeep_on_websocket_message(conn i64, len i32) -> i32; the encoded Message is pending.
	ExportOnWebSocketMessage = "wasmkeep_on_websocket_message"
	// wasmkeep_on_websocket_close(conn i64, code i32, len i32) -> i32; the reason is pending.
	ExportOnWebSocketClose = "wasmkeep_on_websocket_close"
)

// Host imports, module "wasmkeep". Functions that return variable-length data
// take an output buffer (out_ptr, out_cap) and return an i32 n:
//
//	n >= 0: success with an n-byte payload; n < 0: failure with a -n-byte
//	error payload. If the payload fits in out_cap it has been written at
//	out_ptr; otherwise the host keeps it pending and the guest fetches it
//	whole with take_pending(ptr) into a buffer of at least |n| bytes.
//
// Hooks that receive data get its length as an argument, and the data is
// pending in the same way.
const (
	HostTakePending = "take_pending" // (ptr i32) -> i32: copies the pending payload, returns its length, or -1 if none
	HostHookError   = "hook_error"   // (ptr, len i32): the message of the hook that is about to fail
	HostRespond     = "respond"      // (ptr, len i32) -> i32: the encoded Response to the current request; 0 or an errno
	HostSQLExec     = "sql_exec"     // (sql_ptr, sql_len, params_ptr, params_len, flags, out_ptr, out_cap i32) -> i32
	HostSQLQuery    = "sql_query"    // (sql_ptr, sql_len, params_ptr, params_len, out_ptr, out_cap i32) -> i32
	HostDeleteSelf  = "delete_self"  // (flags, out_ptr, out_cap i32) -> i32
	HostAlarmSet    = "alarm_set"    // (at_ms i64)
	HostAlarmGet    = "alarm_get"    // () -> i64: the pending alarm in ms since the epoch, or -1
	HostAlarmClear  = "alarm_clear"  // ()
	HostActorCall   = "actor_call"   // (addr_ptr, addr_len, req_ptr, req_len, out_ptr, out_cap i32) -> i32
	HostSelfAddress = "self_address" // (out_ptr, out_cap i32) -> i32
	HostWSSend      = "ws_send"      // (conn i64, kind, ptr, len i32) -> i32: a SendError code
	HostWSClose     = "ws_close"     // (conn i64, code, reason_ptr, reason_len i32)
	HostWSList      = "ws_connections"
	HostEnvGet      = "env_get"    // (name_ptr, name_len, out_ptr, out_cap i32) -> i32
	HostHTTPFetch   = "http_fetch" // (req_ptr, req_len, out_ptr, out_cap i32) -> i32
)

// Flags of sql_exec.
const (
	ExecDurable uint32 = 1 << 0 // exec-durable: return once the write is durable
)

// Flags of delete_self.
const (
	DeleteDurable uint32 = 1 << 0 // delete-self-durable: delete now, inside the call
)

// Errno values that respond returns.
const (
	RespondOK          = 0
	RespondNotRequest  = 1 // the current event is not a request
	RespondTwice       = 2 // a response was already given
	RespondBadEncoding = 3 // the bytes are not an encoded Response
)

// ValueKind tags a SQL value, one per SQLite storage class.
type ValueKind uint8

const (
	KindNull    ValueKind = 0
	KindInteger ValueKind = 1
	KindReal    ValueKind = 2
	KindText    ValueKind = 3
	KindBlob    ValueKind = 4
)

// SQLErrorKind says why a statement failed (the book's sql-error-kind).
type SQLErrorKind uint8

const (
	SQLSyntax             SQLErrorKind = 0
	SQLConstraint         SQLErrorKind = 1
	SQLBind               SQLErrorKind = 2
	SQLMultipleStatements SQLErrorKind = 3
	SQLQuotaExceeded      SQLErrorKind = 4
	SQLNotAllowed         SQLErrorKind = 5
	SQLInternal           SQLErrorKind = 6
)

var sqlErrorKindNames = [...]string{"syntax", "constraint", "bind", "multiple-statements", "quota-exceeded", "not-allowed", "internal"}

func (k SQLErrorKind) String() string {
	if int(k) < len(sqlErrorKindNames) {
		return sqlErrorKindNames[k]
	}
	return "unknown"
}

// CallErrorKind says why actors.call failed (the book's call-error).
type CallErrorKind uint8

const (
	CallInvalidAddress CallErrorKind = 0
	CallReentrant      CallErrorKind = 1
	CallTooLarge       CallErrorKind = 2
	CallTimeout        CallErrorKind = 3
	CallFailed         CallErrorKind = 4
)

var callErrorKindNames = [...]string{"invalid-address", "reentrant", "too-large", "timeout", "failed"}

func (k CallErrorKind) String() string {
	if int(k) < len(callErrorKindNames) {
		return callErrorKindNames[k]
	}
	return "unknown"
}

// SendError codes returned by ws_send.
const (
	SendOK                = 0
	SendUnknownConnection = 1
	SendBackpressure      = 2
)

// MessageKind tags a WebSocket message.
type MessageKind uint8

const (
	MessageText   MessageKind = 0
	MessageBinary MessageKind = 1
)

// FetchErrorKind says why an outbound HTTP request failed.
type FetchErrorKind uint8

const (
	FetchInvalidRequest          FetchErrorKind = 0
	FetchDestinationIPProhibited FetchErrorKind = 1
	FetchHTTPRequestDenied       FetchErrorKind = 2
	FetchDNSError                FetchErrorKind = 3
	FetchConnectionRefused       FetchErrorKind = 4
	FetchTimeout                 FetchErrorKind = 5
	FetchTLSError                FetchErrorKind = 6
	FetchTooLarge                FetchErrorKind = 7
	FetchTooManyRequests         FetchErrorKind = 8
	FetchFailed                  FetchErrorKind = 9
)

var fetchErrorKindNames = [...]string{"invalid-request", "destination-ip-prohibited", "HTTP-request-denied", "dns-error", "connection-refused", "timeout", "tls-error", "too-large", "too-many-requests", "failed"}

func (k FetchErrorKind) String() string {
	if int(k) < len(fetchErrorKindNames) {
		return fetchErrorKindNames[k]
	}
	return "unknown"
}
