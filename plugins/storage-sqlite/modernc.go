package sqlitestorage

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// modernc binds modernc.org/sqlite/lib, SQLite transpiled to Go: no cgo,
// and statements run on the calling goroutine.
type modernc struct{}

func init() {
	// What modernc.org/sqlite's own init does before any connection opens
	// (a page-size fix on linux/arm64, a no-op elsewhere).
	sqlite3.PatchIssue199()
	// See memory.go. sqlite3_config takes a varargs list: 8 bytes an
	// argument.
	tls := libc.NewTLS()
	defer tls.Close()
	va := libc.Xmalloc(tls, 24)
	defer libc.Xfree(tls, va)
	memoryConfig["modernc"] = [2]int32{
		sqlite3.Xsqlite3_config(tls, configLookaside, libc.VaList(va, int32(lookasideSize), int32(lookasideSlots))),
		sqlite3.Xsqlite3_config(tls, configPageCache, libc.VaList(va, uintptr(0), int32(0), int32(pageCacheInitPages))),
	}
}

// mvfsName is vfsName in C memory, for the life of the process.
var mvfsName = func() uintptr {
	p, err := libc.CString(vfsName)
	if err != nil {
		panic(err)
	}
	return p
}()

// scratchMax bounds the C buffer a connection keeps for SQL text and bound
// values; larger ones get a buffer of their own, freed at once.
const scratchMax = 64 << 10

type mconn struct {
	held *libc.TLS // from tlsPool while in use (tls); nil at rest
	db   uintptr
	out  uintptr // 16 bytes for C out-parameters

	scratch    uintptr
	scratchCap int
}

type mstmt struct {
	c *mconn
	p uintptr
}

func (modernc) open(path string) (conn, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return nil, fmt.Errorf("database path %q contains a NUL byte", path)
	}
	c := &mconn{}
	tls := c.tls()
	if newPeak() {
		prefault(tls)
	}
	if c.out = libc.Xmalloc(tls, 16); c.out == 0 {
		c.freeC()
		return nil, fmt.Errorf("open %s: out of memory", path)
	}
	name, err := libc.CString(path)
	if err != nil {
		c.freeC()
		return nil, err
	}
	const flags = sqlite3.SQLITE_OPEN_READWRITE | sqlite3.SQLITE_OPEN_CREATE |
		sqlite3.SQLITE_OPEN_NOMUTEX | sqlite3.SQLITE_OPEN_EXRESCODE
	rc := sqlite3.Xsqlite3_open_v2(tls, name, c.out, flags, mvfsName)
	libc.Xfree(tls, name)
	c.db = *(*uintptr)(cmem(c.out))
	if rc != sqlite3.SQLITE_OK {
		err := c.err(rc)
		if c.db != 0 {
			sqlite3.Xsqlite3_close_v2(tls, c.db)
		}
		c.freeC()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	connOpened()
	return c, nil
}

// cmem turns an address of C memory (allocated by modernc's libc, outside
// the Go heap) into a pointer.
func cmem(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// cbytes is a view of n bytes of C memory at p.
func cbytes(p uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(cmem(p)), n)
}

func (c *mconn) err(rc int32) error {
	return &sqliteError{code: int(rc), msg: libc.GoString(sqlite3.Xsqlite3_errmsg(c.tls(), c.db))}
}

// cbuf returns C memory holding b (and at least one byte, so an empty text
// or blob is not bound as NULL), and whether the caller must free it.
func (c *mconn) cbuf(b []byte) (uintptr, bool, error) {
	n := max(len(b), 1)
	if n > scratchMax {
		p := libc.Xmalloc(c.tls(), types.Size_t(n))
		if p == 0 {
			return 0, false, &sqliteError{code: sqlite3.SQLITE_NOMEM, msg: fmt.Sprintf("out of memory for %d bytes", n)}
		}
		copy(cbytes(p, n), b)
		return p, true, nil
	}
	if n > c.scratchCap {
		size := min(max(n, 2*c.scratchCap, 256), scratchMax)
		p := libc.Xrealloc(c.tls(), c.scratch, types.Size_t(size))
		if p == 0 {
			return 0, false, &sqliteError{code: sqlite3.SQLITE_NOMEM, msg: "out of memory"}
		}
		c.scratch, c.scratchCap = p, size
	}
	copy(cbytes(c.scratch, n), b)
	return c.scratch, false, nil
}

func (c *mconn) prepare(sql string) (stmt, string, error) {
	if len(sql) > math.MaxInt32 {
		return nil, "", &sqliteError{code: sqlite3.SQLITE_TOOBIG, msg: fmt.Sprintf("the SQL text is %d bytes long", len(sql))}
	}
	text := unsafe.Slice(unsafe.StringData(sql), len(sql))
	p, owned, err := c.cbuf(text)
	if err != nil {
		return nil, "", err
	}
	if owned {
		defer libc.Xfree(c.tls(), p)
	}
	pstmt, ptail := c.out, c.out+8
	rc := sqlite3.Xsqlite3_prepare_v3(c.tls(), c.db, p, int32(len(sql)), sqlite3.SQLITE_PREPARE_PERSISTENT, pstmt, ptail)
	if rc != sqlite3.SQLITE_OK {
		return nil, "", c.err(rc)
	}
	rest := sql[*(*uintptr)(cmem(ptail))-p:]
	s := *(*uintptr)(cmem(pstmt))
	if s == 0 {
		return nil, rest, nil
	}
	return &mstmt{c: c, p: s}, rest, nil
}

// SQLite calls its callbacks through C function pointers, so they are plain
// functions that find their connection's hooks by database handle.
var hooks sync.Map // uintptr (sqlite3*) -> *mhooks

type mhooks struct {
	auth     func(action int, arg1, arg2, dbName string) int
	progress func() bool
	funcs    []mfunc // by the index SQLite passes back as user data
}

type mfunc struct {
	f   sqlFunc
	arg int
}

func authorizerTrampoline(_ *libc.TLS, db uintptr, action int32, arg1, arg2, dbName, _ uintptr) int32 {
	h, ok := hooks.Load(db)
	if !ok {
		return sqlite3.SQLITE_DENY
	}
	return int32(h.(*mhooks).auth(int(action), libc.GoString(arg1), libc.GoString(arg2), libc.GoString(dbName)))
}

func progressTrampoline(_ *libc.TLS, db uintptr) int32 {
	h, ok := hooks.Load(db)
	if !ok || h.(*mhooks).progress() {
		return 1
	}
	return 0
}

// cfunc is the C function pointer of a top-level Go function as modernc's
// transpiled code calls it: the address of the function value (the same
// conversion modernc.org/sqlite uses for its own callbacks).
func cfunc[T any](f T) uintptr { return *(*uintptr)(unsafe.Pointer(&struct{ f T }{f})) }

// funcTrampoline runs a Go SQL function; its user data is its index in
// the connection's mhooks.funcs.
func funcTrampoline(tls *libc.TLS, ctx uintptr, _ int32, argv uintptr) {
	db := sqlite3.Xsqlite3_context_db_handle(tls, ctx)
	h, ok := hooks.Load(db)
	if !ok {
		sqlite3.Xsqlite3_result_error_code(tls, ctx, sqlite3.SQLITE_MISUSE)
		return
	}
	hk := h.(*mhooks)
	fn := hk.funcs[sqlite3.Xsqlite3_user_data(tls, ctx)]
	fn.f(&mcall{tls: tls, db: db, ctx: ctx, argv: argv, progress: hk.progress}, fn.arg)
}

var (
	authorizerPtr = cfunc(authorizerTrampoline)
	progressPtr   = cfunc(progressTrampoline)
	funcPtr       = cfunc(funcTrampoline)
)

// mcall is one call of a Go SQL function.
type mcall struct {
	tls      *libc.TLS
	db, ctx  uintptr
	argv     uintptr
	progress func() bool
}

func (c *mcall) arg(i int) uintptr { return *(*uintptr)(cmem(c.argv + uintptr(i)*8)) }

func (c *mcall) argType(i int) int { return int(sqlite3.Xsqlite3_value_type(c.tls, c.arg(i))) }

func (c *mcall) argText(i int) []byte {
	v := c.arg(i)
	p := sqlite3.Xsqlite3_value_text(c.tls, v) // the pointer first, then its length
	if p == 0 {
		return nil
	}
	return cvalue(p, int(sqlite3.Xsqlite3_value_bytes(c.tls, v)))
}

// cvalue is cbytes for a value that is not NULL: empty, not nil, when n is 0.
func cvalue(p uintptr, n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return cbytes(p, n)
}

func (c *mcall) argBlob(i int) []byte {
	v := c.arg(i)
	p := sqlite3.Xsqlite3_value_blob(c.tls, v)
	if p == 0 {
		if sqlite3.Xsqlite3_value_type(c.tls, v) == sqlite3.SQLITE_NULL {
			return nil
		}
		return []byte{} // an empty blob
	}
	return cvalue(p, int(sqlite3.Xsqlite3_value_bytes(c.tls, v)))
}

func (c *mcall) limit(id int) int { return int(sqlite3.Xsqlite3_limit(c.tls, c.db, int32(id), -1)) }

func (c *mcall) resultInt(n int64) { sqlite3.Xsqlite3_result_int64(c.tls, c.ctx, n) }

func (c *mcall) resultText(b []byte) {
	// SQLITE_TRANSIENT: SQLite copies the text before the call returns.
	p := libc.Xmalloc(c.tls, types.Size_t(max(len(b), 1)))
	if p == 0 {
		sqlite3.Xsqlite3_result_error_nomem(c.tls, c.ctx)
		return
	}
	copy(cbytes(p, len(b)), b)
	sqlite3.Xsqlite3_result_text64(c.tls, c.ctx, p, uint64(len(b)), sqlite3.SQLITE_TRANSIENT, sqlite3.SQLITE_UTF8)
	libc.Xfree(c.tls, p)
}

func (c *mcall) resultError(code int, msg string) {
	if msg != "" {
		z, err := libc.CString(msg)
		if err == nil {
			sqlite3.Xsqlite3_result_error(c.tls, c.ctx, z, -1)
			libc.Xfree(c.tls, z)
		}
	}
	sqlite3.Xsqlite3_result_error_code(c.tls, c.ctx, int32(code))
}

func (c *mcall) stop() bool { return c.progress() }

func (c *mconn) setHooks(auth func(action int, arg1, arg2, dbName string) int, progress func() bool) error {
	hooks.Store(c.db, &mhooks{auth: auth, progress: progress})
	if rc := sqlite3.Xsqlite3_set_authorizer(c.tls(), c.db, authorizerPtr, c.db); rc != sqlite3.SQLITE_OK {
		return c.err(rc)
	}
	sqlite3.Xsqlite3_progress_handler(c.tls(), c.db, progressOps, progressPtr, c.db)
	return nil
}

func (c *mconn) createFunction(name string, nArg int, arg int, f sqlFunc) error {
	h, ok := hooks.Load(c.db)
	if !ok {
		return fmt.Errorf("function %s: the connection's hooks are not set", name)
	}
	hk := h.(*mhooks)
	z, err := libc.CString(name)
	if err != nil {
		return err
	}
	defer libc.Xfree(c.tls(), z)
	const flags = sqlite3.SQLITE_UTF8 | sqlite3.SQLITE_DETERMINISTIC | sqlite3.SQLITE_INNOCUOUS
	rc := sqlite3.Xsqlite3_create_function_v2(c.tls(), c.db, z, int32(nArg), flags, uintptr(len(hk.funcs)), funcPtr, 0, 0, 0)
	if rc != sqlite3.SQLITE_OK {
		return c.err(rc)
	}
	hk.funcs = append(hk.funcs, mfunc{f: f, arg: arg})
	return nil
}

// interrupt needs no TLS: sqlite3_interrupt only sets a flag.
func (c *mconn) interrupt() { sqlite3.Xsqlite3_interrupt(nil, c.db) }

func (c *mconn) configure(op int, on bool) error {
	v := int32(0)
	if on {
		v = 1
	}
	// sqlite3_db_config(db, op, int onoff, int *pRes): a varargs list of an
	// int and a NULL pointer, 8 bytes each.
	va := libc.VaList(c.out, v, uintptr(0))
	if rc := sqlite3.Xsqlite3_db_config(c.tls(), c.db, int32(op), va); rc != sqlite3.SQLITE_OK {
		return c.err(rc)
	}
	return nil
}

func (c *mconn) setLimit(id, value int) {
	sqlite3.Xsqlite3_limit(c.tls(), c.db, int32(id), int32(value))
}

func (c *mconn) inTx() bool { return sqlite3.Xsqlite3_get_autocommit(c.tls(), c.db) == 0 }

func (c *mconn) changes() int64 { return sqlite3.Xsqlite3_changes64(c.tls(), c.db) }

func (c *mconn) pagesWritten() int64 {
	cur := c.out
	sqlite3.Xsqlite3_db_status(c.tls(), c.db, sqlite3.SQLITE_DBSTATUS_CACHE_WRITE, cur, cur+4, 1)
	return int64(*(*int32)(cmem(cur)))
}

func (c *mconn) close() error {
	// Before the handle is freed: another connection may get its address.
	hooks.Delete(c.db)
	var err error
	if rc := sqlite3.Xsqlite3_close_v2(c.tls(), c.db); rc != sqlite3.SQLITE_OK {
		err = c.err(rc)
	}
	connClosed()
	c.freeC()
	return err
}

func (c *mconn) freeC() {
	libc.Xfree(c.tls(), c.scratch)
	libc.Xfree(c.tls(), c.out)
	c.rest()
}

// tls is the libc thread state the connection's calls run with, taken from
// tlsPool until the connection rests.
func (c *mconn) tls() *libc.TLS {
	if c.held == nil {
		c.held = tlsPool.get()
	}
	return c.held
}

func (c *mconn) rest() {
	if c.held != nil {
		tlsPool.put(c.held)
		c.held = nil
	}
}

// tlsPool holds the libc thread states (TLS) of connections at rest. A TLS
// keeps every C stack frame its calls have needed, about 20 KiB once
// SQLite's parser and virtual machine have run: one per connection cost
// that for each resident actor, though only a connection inside a call
// needs one. It is a free list rather than a sync.Pool, which would drop
// a TLS without closing it.
var tlsPool tlsFreeList

type tlsFreeList struct {
	mu   sync.Mutex
	free []*libc.TLS
}

// maxRestingTLS bounds the TLSs kept for reuse: about as many as events
// run SQL at once on a busy node. Beyond it a TLS is closed.
var maxRestingTLS = max(64, 4*runtime.GOMAXPROCS(0))

func (l *tlsFreeList) get() *libc.TLS {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		t := l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		return t
	}
	return libc.NewTLS()
}

func (l *tlsFreeList) put(t *libc.TLS) {
	l.mu.Lock()
	if len(l.free) < maxRestingTLS {
		l.free = append(l.free, t)
		t = nil
	}
	l.mu.Unlock()
	if t != nil {
		t.Close()
	}
}

func (s *mstmt) params() int { return int(sqlite3.Xsqlite3_bind_parameter_count(s.c.tls(), s.p)) }

func (s *mstmt) readonly() bool { return sqlite3.Xsqlite3_stmt_readonly(s.c.tls(), s.p) != 0 }

func (s *mstmt) bind(i int, v abi.Value) error {
	tls, idx := s.c.tls(), int32(i)
	var rc int32
	switch v.Kind {
	case abi.KindInteger:
		rc = sqlite3.Xsqlite3_bind_int64(tls, s.p, idx, v.Int)
	case abi.KindReal:
		rc = sqlite3.Xsqlite3_bind_double(tls, s.p, idx, v.Float)
	case abi.KindText, abi.KindBlob:
		p, owned, err := s.c.cbuf(v.Bytes)
		if err != nil {
			return err
		}
		// SQLITE_TRANSIENT: SQLite copies the bytes, so the buffer is free
		// again once the call returns.
		n := uint64(len(v.Bytes))
		if v.Kind == abi.KindText {
			rc = sqlite3.Xsqlite3_bind_text64(tls, s.p, idx, p, n, sqlite3.SQLITE_TRANSIENT, sqlite3.SQLITE_UTF8)
		} else {
			rc = sqlite3.Xsqlite3_bind_blob64(tls, s.p, idx, p, n, sqlite3.SQLITE_TRANSIENT)
		}
		if owned {
			libc.Xfree(tls, p)
		}
	default: // KindNull; the caller has refused unknown kinds
		rc = sqlite3.Xsqlite3_bind_null(tls, s.p, idx)
	}
	if rc != sqlite3.SQLITE_OK {
		return s.c.err(rc)
	}
	return nil
}

func (s *mstmt) step() (bool, error) {
	switch rc := sqlite3.Xsqlite3_step(s.c.tls(), s.p); rc {
	case sqlite3.SQLITE_ROW:
		return true, nil
	case sqlite3.SQLITE_DONE:
		return false, nil
	default:
		return false, s.c.err(rc)
	}
}

func (s *mstmt) columns() int { return int(sqlite3.Xsqlite3_column_count(s.c.tls(), s.p)) }

func (s *mstmt) columnName(i int) []byte {
	p := sqlite3.Xsqlite3_column_name(s.c.tls(), s.p, int32(i))
	if p == 0 {
		return nil
	}
	return cbytes(p, int(libc.Xstrlen(s.c.tls(), p)))
}

func (s *mstmt) column(i int) abi.Value {
	tls, idx := s.c.tls(), int32(i)
	switch sqlite3.Xsqlite3_column_type(tls, s.p, idx) {
	case sqlite3.SQLITE_INTEGER:
		return abi.Value{Kind: abi.KindInteger, Int: sqlite3.Xsqlite3_column_int64(tls, s.p, idx)}
	case sqlite3.SQLITE_FLOAT:
		return abi.Value{Kind: abi.KindReal, Float: sqlite3.Xsqlite3_column_double(tls, s.p, idx)}
	case sqlite3.SQLITE_TEXT:
		// The pointer first, then the length it has (SQLite's rule).
		p := sqlite3.Xsqlite3_column_text(tls, s.p, idx)
		return abi.Value{Kind: abi.KindText, Bytes: cbytes(p, int(sqlite3.Xsqlite3_column_bytes(tls, s.p, idx)))}
	case sqlite3.SQLITE_BLOB:
		p := sqlite3.Xsqlite3_column_blob(tls, s.p, idx)
		return abi.Value{Kind: abi.KindBlob, Bytes: cbytes(p, int(sqlite3.Xsqlite3_column_bytes(tls, s.p, idx)))}
	default:
		return abi.Value{Kind: abi.KindNull}
	}
}

func (s *mstmt) reset() { sqlite3.Xsqlite3_reset(s.c.tls(), s.p) }

func (s *mstmt) finalize() { sqlite3.Xsqlite3_finalize(s.c.tls(), s.p) }
