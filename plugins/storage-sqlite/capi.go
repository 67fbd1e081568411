package sqlitestorage

import "github.com/wasmkeep/wasmkeep/kernel/abi"

// binding reaches the SQLite C library. Everything above it (the sandbox,
// the budgets, the transaction rules) is the same whatever the binding:
// modernc.go is the pure Go one, mattn.go the cgo one.
//
// It is the C API rather than database/sql because database/sql drivers
// cannot return values exactly: both modernc and mattn turn TEXT read from a
// column declared DATE, DATETIME or TIMESTAMP into time.Time, and neither
// reports a statement's unparsed tail or parameter count.
type binding interface {
	// open opens a connection on the VFS vfsName (mattn: a copy of it
	// that takes an absolute path as given), which takes no locks: a
	// connection to a file is opened with openFile, which does.
	open(path string) (conn, error)
}

// conn is one SQLite connection, used by one goroutine at a time.
type conn interface {
	// prepare compiles the first statement of sql; rest is the text after
	// it. s is nil when sql holds no statement (only blanks and comments).
	prepare(sql string) (s stmt, rest string, err error)
	// setHooks installs the authorizer, which SQLite asks about every
	// operation of a statement it compiles and answers authOK, authDeny or
	// authIgnore, and the progress handler, which SQLite calls every
	// progressOps virtual machine steps of a running statement and which
	// stops the statement (SQLITE_INTERRUPT) by returning true. Both run on
	// the goroutine calling prepare or step.
	setHooks(auth func(action int, arg1, arg2, dbName string) int, progress func() bool) error
	configure(op int, on bool) error // sqlite3_db_config
	setLimit(id, value int)
	inTx() bool
	// changes is the number of rows the last INSERT, UPDATE or DELETE
	// changed.
	changes() int64
	// pagesWritten is the number of pages written to the log or the
	// database since the previous call.
	pagesWritten() int64
	// rest says that no statement runs until the next call (the event is
	// over): a binding may give back what only a call needs.
	rest()
	// interrupt is sqlite3_interrupt: the statement running on the
	// connection fails with SQLITE_INTERRUPT at the next point where
	// SQLite checks (the parser, the virtual machine's loops, the sorter).
	// It is the one call that may come from another goroutine; the caller
	// makes sure the connection is open.
	interrupt()
	// createFunction registers f as the scalar SQL function name of nArg
	// arguments (sqlite3_create_function_v2, UTF-8, deterministic and
	// innocuous, as SQLite's own scalar functions are), in place of a
	// built-in one of the same name and arity. arg is passed to f.
	createFunction(name string, nArg int, arg int, f sqlFunc) error
	close() error
}

// sqlFunc computes one call of a Go SQL function; arg is its registration's.
type sqlFunc func(call funcCall, arg int)

// funcCall is one call of a Go SQL function: its arguments, as SQLite
// converts them, and its result.
type funcCall interface {
	argType(i int) int // typeInteger ... typeNull
	// argText is sqlite3_value_text (a number or a blob turned into text),
	// argBlob sqlite3_value_blob; nil for NULL. Both stay valid until the
	// function returns.
	argText(i int) []byte
	argBlob(i int) []byte
	limit(id int) int // sqlite3_limit's current value
	resultInt(n int64)
	resultText(b []byte)
	// resultError fails the call with code; msg empty keeps SQLite's
	// message for the code.
	resultError(code int, msg string)
	// stop reports whether the statement must stop (the progress handler's
	// answer).
	stop() bool
}

// stmt is one prepared statement of a conn.
type stmt interface {
	params() int
	readonly() bool
	bind(i int, v abi.Value) error // i counts from 1
	step() (row bool, err error)
	columns() int
	// columnName and column's Bytes stay valid until the next call on the
	// statement.
	columnName(i int) []byte
	column(i int) abi.Value
	reset()
	finalize()
}

// sqliteError is a failure reported by SQLite: its extended result code and
// its message.
type sqliteError struct {
	code int
	msg  string
}

func (e *sqliteError) Error() string { return e.msg }

// SQLite's C API numbers, which every binding shares.
const (
	// Primary result codes.
	rcError      = 1
	rcInterrupt  = 9
	rcFull       = 13
	rcNoMem      = 7
	rcTooBig     = 18
	rcConstraint = 19
	rcMismatch   = 20
	rcAuth       = 23
	rcRange      = 25

	// Authorizer actions and answers.
	authCreateIndex       = 1
	authCreateTable       = 2
	authCreateTempIndex   = 3
	authCreateTempTable   = 4
	authCreateTempTrigger = 5
	authCreateTempView    = 6
	authCreateTrigger     = 7
	authCreateView        = 8
	authDelete            = 9
	authDropIndex         = 10
	authDropTable         = 11
	authDropTempIndex     = 12
	authDropTempTable     = 13
	authDropTempTrigger   = 14
	authDropTempView      = 15
	authDropTrigger       = 16
	authDropView          = 17
	authInsert            = 18
	authPragma            = 19
	authRead              = 20
	authSelect            = 21
	authTransaction       = 22
	authUpdate            = 23
	authAttach            = 24
	authDetach            = 25
	authAlterTable        = 26
	authReindex           = 27
	authAnalyze           = 28
	authCreateVTable      = 29
	authDropVTable        = 30
	authFunction          = 31
	authSavepoint         = 32
	authRecursive         = 33

	authOK     = 0
	authDeny   = 1
	authIgnore = 2

	limitLength      = 0
	limitAttached    = 7
	limitLikePattern = 8

	// Fundamental datatypes.
	typeInteger = 1
	typeFloat   = 2
	typeText    = 3
	typeBlob    = 4
	typeNull    = 5

	// How often a running statement checks whether it must stop; about
	// a few microseconds of work.
	progressOps = 1000

	// sqlite3_config options, process-wide.
	configPageCache = 7
	configLookaside = 13

	// sqlite3_db_config options, per connection.
	configEnableLoadExtension = 1005
	configDefensive           = 1010
	configNoCkptOnClose       = 1006
	configTrustedSchema       = 1017
)
