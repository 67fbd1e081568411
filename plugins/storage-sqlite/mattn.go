//go:build cgo

package sqlitestorage

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// SQLite's C API as github.com/mattn/go-sqlite3 links it into the binary:
// the amalgamation it compiles (or, with its libsqlite3 tag, the system
// library). The prototypes are declared here, copied from SQLite 3.54's
// sqlite3.h, rather than included: the header sits in go-sqlite3's module
// directory, which a cgo preamble cannot name portably, and the C API keeps
// these signatures stable across releases. The references resolve when the
// binary is linked (cgo marks this package for external linking).
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef long long sqlite3_int64;
typedef unsigned long long sqlite3_uint64;

int sqlite3_open_v2(const char *filename, sqlite3 **ppDb, int flags, const char *zVfs);

typedef struct sqlite3_file sqlite3_file;
typedef const char *sqlite3_filename;
typedef void (*sqlite3_syscall_ptr)(void);
typedef struct sqlite3_vfs sqlite3_vfs;
struct sqlite3_vfs {
	int iVersion;
	int szOsFile;
	int mxPathname;
	sqlite3_vfs *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(sqlite3_vfs *, sqlite3_filename zName, sqlite3_file *, int flags, int *pOutFlags);
	int (*xDelete)(sqlite3_vfs *, const char *zName, int syncDir);
	int (*xAccess)(sqlite3_vfs *, const char *zName, int flags, int *pResOut);
	int (*xFullPathname)(sqlite3_vfs *, const char *zName, int nOut, char *zOut);
	void *(*xDlOpen)(sqlite3_vfs *, const char *zFilename);
	void (*xDlError)(sqlite3_vfs *, int nByte, char *zErrMsg);
	void (*(*xDlSym)(sqlite3_vfs *, void *, const char *zSymbol))(void);
	void (*xDlClose)(sqlite3_vfs *, void *);
	int (*xRandomness)(sqlite3_vfs *, int nByte, char *zOut);
	int (*xSleep)(sqlite3_vfs *, int microseconds);
	int (*xCurrentTime)(sqlite3_vfs *, double *);
	int (*xGetLastError)(sqlite3_vfs *, int, char *);
	int (*xCurrentTimeInt64)(sqlite3_vfs *, sqlite3_int64 *);
	int (*xSetSystemCall)(sqlite3_vfs *, const char *zName, sqlite3_syscall_ptr);
	sqlite3_syscall_ptr (*xGetSystemCall)(sqlite3_vfs *, const char *zName);
	const char *(*xNextSystemCall)(sqlite3_vfs *, const char *zName);
};
sqlite3_vfs *sqlite3_vfs_find(const char *zVfsName);
int sqlite3_vfs_register(sqlite3_vfs *, int makeDflt);
int sqlite3_close_v2(sqlite3 *);
const char *sqlite3_errmsg(sqlite3 *);
int sqlite3_prepare_v3(sqlite3 *db, const char *zSql, int nByte, unsigned int prepFlags, sqlite3_stmt **ppStmt, const char **pzTail);
int sqlite3_set_authorizer(sqlite3 *, int (*xAuth)(void *, int, const char *, const char *, const char *, const char *), void *pUserData);
void sqlite3_progress_handler(sqlite3 *, int, int (*)(void *), void *);
int sqlite3_db_config(sqlite3 *, int op, ...);
int sqlite3_config(int, ...);
int sqlite3_limit(sqlite3 *, int id, int newVal);
int sqlite3_get_autocommit(sqlite3 *);
sqlite3_int64 sqlite3_changes64(sqlite3 *);
int sqlite3_db_status(sqlite3 *, int op, int *pCur, int *pHiwtr, int resetFlg);
int sqlite3_bind_parameter_count(sqlite3_stmt *);
int sqlite3_stmt_readonly(sqlite3_stmt *pStmt);
int sqlite3_bind_int64(sqlite3_stmt *, int, sqlite3_int64);
int sqlite3_bind_double(sqlite3_stmt *, int, double);
int sqlite3_bind_null(sqlite3_stmt *, int);
int sqlite3_bind_text64(sqlite3_stmt *, int, const char *, sqlite3_uint64, void (*)(void *), unsigned char encoding);
int sqlite3_bind_blob64(sqlite3_stmt *, int, const void *, sqlite3_uint64, void (*)(void *));
int sqlite3_step(sqlite3_stmt *);
int sqlite3_column_count(sqlite3_stmt *pStmt);
const char *sqlite3_column_name(sqlite3_stmt *, int N);
int sqlite3_column_type(sqlite3_stmt *, int iCol);
sqlite3_int64 sqlite3_column_int64(sqlite3_stmt *, int iCol);
double sqlite3_column_double(sqlite3_stmt *, int iCol);
const unsigned char *sqlite3_column_text(sqlite3_stmt *, int iCol);
const void *sqlite3_column_blob(sqlite3_stmt *, int iCol);
int sqlite3_column_bytes(sqlite3_stmt *, int iCol);
int sqlite3_reset(sqlite3_stmt *pStmt);
int sqlite3_finalize(sqlite3_stmt *pStmt);
void sqlite3_interrupt(sqlite3 *);
typedef struct sqlite3_context sqlite3_context;
typedef struct sqlite3_value sqlite3_value;
int sqlite3_create_function_v2(sqlite3 *db, const char *zFunctionName, int nArg, int eTextRep, void *pApp,
	void (*xFunc)(sqlite3_context *, int, sqlite3_value **), void (*xStep)(sqlite3_context *, int, sqlite3_value **),
	void (*xFinal)(sqlite3_context *), void (*xDestroy)(void *));
void *sqlite3_user_data(sqlite3_context *);
sqlite3 *sqlite3_context_db_handle(sqlite3_context *);
int sqlite3_value_type(sqlite3_value *);
const unsigned char *sqlite3_value_text(sqlite3_value *);
const void *sqlite3_value_blob(sqlite3_value *);
int sqlite3_value_bytes(sqlite3_value *);
void sqlite3_result_int64(sqlite3_context *, sqlite3_int64);
void sqlite3_result_text64(sqlite3_context *, const char *, sqlite3_uint64, void (*)(void *), unsigned char encoding);
void sqlite3_result_error(sqlite3_context *, const char *, int);
void sqlite3_result_error_code(sqlite3_context *, int);

// The hooks, exported from mattn_hooks.go.
extern int wkAuthorize(uintptr_t h, int action, char *arg1, char *arg2, char *dbName);
extern int wkProgress(uintptr_t h);
extern void wkFunc(void *ctx, void *argv, uintptr_t h);

static int wk_authorizer(void *h, int action, const char *arg1, const char *arg2, const char *dbName, const char *trigger) {
	return wkAuthorize((uintptr_t)h, action, (char *)arg1, (char *)arg2, (char *)dbName);
}

static int wk_progress(void *h) { return wkProgress((uintptr_t)h); }

static int wk_set_hooks(sqlite3 *db, uintptr_t h, int ops) {
	int rc = sqlite3_set_authorizer(db, wk_authorizer, (void *)h);
	if (rc == 0) {
		sqlite3_progress_handler(db, ops, wk_progress, (void *)h);
	}
	return rc;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// wk_warm_heap takes n bytes from this thread's malloc arena, has the kernel
// populate their whole pages and frees them (prefault.go). It returns the
// pages populated, none if the kernel refused.
typedef struct {
	uintptr_t start, end;
} wk_range;

static wk_range wk_warm_heap(size_t n) {
	wk_range r = {0, 0};
	char *p = malloc(n);
	if (p == 0) {
		return r;
	}
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	r.start = ((uintptr_t)p + page - 1) & ~(page - 1);
	r.end = ((uintptr_t)p + n) & ~(page - 1);
	if (r.end <= r.start || madvise((void *)r.start, r.end - r.start, MADV_POPULATE_WRITE) != 0) {
		r.start = r.end = 0;
	}
	free(p);
	return r;
}

// wk_vfs is the VFS base, but an absolute path is its own full path unless
// the file itself is a link. The unix VFSes resolve every component of a
// database's path (an lstat each, and a readlink for a link) so that the
// log lands beside the file a link names; the plugin names each database
// by a path it made, under directories that may be links but rarely by a
// link itself, and the lstats were about 30 µs of each open here: one is
// left. The copy keeps base's methods and its pAppData (which picks the
// unix-none locking), so only xFullPathname differs.
static sqlite3_vfs *wk_vfs_base;
static sqlite3_vfs wk_vfs;

static int wk_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out) {
	struct stat st;
	if (name[0] != '/' || (lstat(name, &st) == 0 && S_ISLNK(st.st_mode))) {
		// A database file that is a link: SQLite opens files with
		// O_NOFOLLOW, so it must be given the link's target.
		return wk_vfs_base->xFullPathname(wk_vfs_base, name, n, out);
	}
	size_t len = strlen(name);
	if (len >= (size_t)n) {
		return 14; // SQLITE_CANTOPEN
	}
	memcpy(out, name, len + 1);
	return 0;
}

static int wk_register_vfs(const char *base, const char *name) {
	wk_vfs_base = sqlite3_vfs_find(base);
	if (wk_vfs_base == 0) {
		return 1; // SQLITE_ERROR
	}
	wk_vfs = *wk_vfs_base;
	if (wk_vfs.iVersion > 3) {
		wk_vfs.iVersion = 3; // the fields copied: a later version's are past them
	}
	wk_vfs.pNext = 0;
	wk_vfs.zName = name;
	wk_vfs.xFullPathname = wk_full_pathname;
	return sqlite3_vfs_register(&wk_vfs, 0);
}

// sqlite3_db_config takes varargs, which Go cannot pass.
static int wk_db_config(sqlite3 *db, int op, int on) {
	return sqlite3_db_config(db, op, on, (int *)0);
}

// sqlite3_config takes varargs too.
static int wk_config_lookaside(int op, int size, int slots) { return sqlite3_config(op, size, slots); }
static int wk_config_pagecache(int op, int initPages) { return sqlite3_config(op, (void *)0, 0, initPages); }

// SQLite reads SQL text up to nByte and never past it, so Go's bytes are
// passed as they are; an empty text needs a pointer that is not NULL.
static const char wk_empty[1] = {0};

typedef struct {
	sqlite3_stmt *stmt;
	int tail; // offset of the unparsed rest
	int rc;
} wk_prepared;

static wk_prepared wk_prepare(sqlite3 *db, const char *sql, int n) {
	wk_prepared p = {0, n, 0};
	const char *tail = 0;
	if (n == 0) {
		sql = wk_empty;
	}
	p.rc = sqlite3_prepare_v3(db, sql, n, 0x01, &p.stmt, &tail); // SQLITE_PREPARE_PERSISTENT
	if (p.rc == 0 && tail != 0) {
		p.tail = (int)(tail - sql);
	}
	return p;
}

// SQLITE_TRANSIENT: SQLite copies the bytes before the call returns, so
// they may be Go memory. A zero-length text or blob is not bound as NULL.
static int wk_bind_text(sqlite3_stmt *s, int i, const char *p, sqlite3_uint64 n) {
	return sqlite3_bind_text64(s, i, n ? p : wk_empty, n, (void (*)(void *))-1, 1); // SQLITE_UTF8
}

static int wk_bind_blob(sqlite3_stmt *s, int i, const void *p, sqlite3_uint64 n) {
	return sqlite3_bind_blob64(s, i, n ? p : wk_empty, n, (void (*)(void *))-1);
}

// One column's value in one call, rather than three.
typedef struct {
	sqlite3_int64 i;
	double f;
	const void *p;
	int n;
	int type;
} wk_value;

static wk_value wk_column(sqlite3_stmt *s, int i) {
	wk_value v = {0, 0, 0, 0, 0};
	v.type = sqlite3_column_type(s, i);
	switch (v.type) {
	case 1: // SQLITE_INTEGER
		v.i = sqlite3_column_int64(s, i);
		break;
	case 2: // SQLITE_FLOAT
		v.f = sqlite3_column_double(s, i);
		break;
	case 3: // SQLITE_TEXT: the pointer first, then the length it has
		v.p = sqlite3_column_text(s, i);
		v.n = sqlite3_column_bytes(s, i);
		break;
	case 4: // SQLITE_BLOB
		v.p = sqlite3_column_blob(s, i);
		v.n = sqlite3_column_bytes(s, i);
		break;
	}
	return v;
}

typedef struct {
	const char *p;
	size_t n;
} wk_text;

static wk_text wk_column_name(sqlite3_stmt *s, int i) {
	wk_text t = {sqlite3_column_name(s, i), 0};
	if (t.p != 0) {
		t.n = strlen(t.p);
	}
	return t;
}

static void wk_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	wkFunc(ctx, argv, (uintptr_t)sqlite3_user_data(ctx));
}

// SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS
static int wk_create_function(sqlite3 *db, const char *name, int nArg, uintptr_t h) {
	return sqlite3_create_function_v2(db, name, nArg, 0x1 | 0x800 | 0x200000, (void *)h, wk_func, 0, 0, 0);
}

static sqlite3_value *wk_arg(void *argv, int i) { return ((sqlite3_value **)argv)[i]; }

// One argument as text or blob in one call: the pointer first, then the
// length it has (SQLite's rule).
static wk_text wk_arg_text(void *argv, int i, int blob) {
	sqlite3_value *v = wk_arg(argv, i);
	wk_text t = {blob ? (const char *)sqlite3_value_blob(v) : (const char *)sqlite3_value_text(v), 0};
	t.n = (size_t)sqlite3_value_bytes(v);
	if (t.p == 0 && t.n == 0 && sqlite3_value_type(v) != 5) {
		t.p = wk_empty; // an empty blob, not NULL
	}
	return t;
}

static void wk_result_text(void *ctx, const char *p, sqlite3_uint64 n) {
	sqlite3_result_text64((sqlite3_context *)ctx, n ? p : wk_empty, n, (void (*)(void *))-1, 1);
}

static int wk_cache_writes(sqlite3 *db) {
	int cur = 0, hi = 0;
	sqlite3_db_status(db, 9, &cur, &hi, 1); // SQLITE_DBSTATUS_CACHE_WRITE
	return cur;
}
*/
import "C"

import (
	"fmt"
	"math"
	"runtime/cgo"
	"strings"
	"unsafe"

	// SQLite's C library: the blank import links go-sqlite3's objects (its
	// compiled amalgamation) into the binary; this file calls them directly.
	_ "github.com/mattn/go-sqlite3"

	"github.com/wasmkeep/wasmkeep/internal/hugeheap"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// mattn binds SQLite as github.com/mattn/go-sqlite3 compiles it (cgo):
// statements run in C on the calling goroutine's thread.
type mattn struct{}

func init() {
	bindings["mattn"] = mattn{}
	// See memory.go. Before the VFS's registration, which initializes
	// SQLite.
	memoryConfig["mattn"] = [2]int32{
		int32(C.wk_config_lookaside(configLookaside, lookasideSize, lookasideSlots)),
		int32(C.wk_config_pagecache(configPageCache, pageCacheInitPages)),
	}
	base := C.CString(vfsName)
	if C.wk_register_vfs(base, cvfsName) != 0 {
		cvfsName = base // SQLite's own resolution, as modernc's
	} else {
		C.free(unsafe.Pointer(base))
	}
}

// pathVFSName is wk_vfs's name: vfsName, with an absolute path taken as it
// is given.
const pathVFSName = vfsName + "-as-given"

// cvfsName is the VFS connections open on, in C memory, for the life of
// the process.
var cvfsName = C.CString(pathVFSName)

func (mattn) remedy(capability string) string { return mattnRemedy(capability) }

type cconn struct {
	db    *C.sqlite3
	hooks cgo.Handle   // *chooks, for the C callbacks; 0 before setHooks
	funcs []cgo.Handle // *cgoFunc, one per Go SQL function
}

type cstmt struct {
	c *cconn
	p *C.sqlite3_stmt
}

// chooks are a connection's callbacks, reached from C through a cgo.Handle.
type chooks struct {
	auth     func(action int, arg1, arg2, dbName string) int
	progress func() bool
}

func (mattn) open(path string) (conn, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return nil, fmt.Errorf("database path %q contains a NUL byte", path)
	}
	name := C.CString(path)
	defer C.free(unsafe.Pointer(name))
	const flags = 0x2 | 0x4 | 0x8000 | 0x02000000 // READWRITE | CREATE | NOMUTEX | EXRESCODE
	if newPeak() {
		hugeheap.Advise() // what the heap grew since, before this connection's memory is touched
		warmHeap()
	}
	var db *C.sqlite3
	rc := C.sqlite3_open_v2(name, &db, flags, cvfsName)
	c := &cconn{db: db}
	if rc != 0 {
		var err error = &sqliteError{code: int(rc), msg: "out of memory"}
		if db != nil {
			err = c.err(rc)
			C.sqlite3_close_v2(db)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	connOpened()
	return c, nil
}

// warmHeap populates heapWarmBytes of the calling thread's malloc arena
// (prefault.go) and returns the pages it populated, [start, end).
func warmHeap() (start, end uintptr) {
	r := C.wk_warm_heap(heapWarmBytes)
	return uintptr(r.start), uintptr(r.end)
}

func (c *cconn) err(rc C.int) error {
	return &sqliteError{code: int(rc), msg: C.GoString(C.sqlite3_errmsg(c.db))}
}

func (c *cconn) prepare(sql string) (stmt, string, error) {
	if len(sql) > math.MaxInt32 {
		return nil, "", &sqliteError{code: rcTooBig, msg: fmt.Sprintf("the SQL text is %d bytes long", len(sql))}
	}
	p := C.wk_prepare(c.db, (*C.char)(unsafe.Pointer(unsafe.StringData(sql))), C.int(len(sql)))
	if p.rc != 0 {
		return nil, "", c.err(p.rc)
	}
	rest := sql[p.tail:]
	if p.stmt == nil {
		return nil, rest, nil
	}
	return &cstmt{c: c, p: p.stmt}, rest, nil
}

func (c *cconn) setHooks(auth func(action int, arg1, arg2, dbName string) int, progress func() bool) error {
	if c.hooks != 0 {
		c.hooks.Delete()
	}
	c.hooks = cgo.NewHandle(&chooks{auth: auth, progress: progress})
	if rc := C.wk_set_hooks(c.db, C.uintptr_t(c.hooks), progressOps); rc != 0 {
		return c.err(rc)
	}
	return nil
}

// cgoFunc is a Go SQL function registered on a connection.
type cgoFunc struct {
	f     sqlFunc
	arg   int
	hooks *chooks
}

func (c *cconn) createFunction(name string, nArg int, arg int, f sqlFunc) error {
	if c.hooks == 0 {
		return fmt.Errorf("function %s: the connection's hooks are not set", name)
	}
	z := C.CString(name)
	defer C.free(unsafe.Pointer(z))
	h := cgo.NewHandle(&cgoFunc{f: f, arg: arg, hooks: c.hooks.Value().(*chooks)})
	if rc := C.wk_create_function(c.db, z, C.int(nArg), C.uintptr_t(h)); rc != 0 {
		h.Delete()
		return c.err(rc)
	}
	c.funcs = append(c.funcs, h)
	return nil
}

// ccall is one call of a Go SQL function.
type ccall struct {
	ctx, argv unsafe.Pointer
	progress  func() bool
}

func (c *ccall) argType(i int) int {
	return int(C.sqlite3_value_type(C.wk_arg(c.argv, C.int(i))))
}

func (c *ccall) argText(i int) []byte { return c.argBytes(i, 0) }

func (c *ccall) argBlob(i int) []byte { return c.argBytes(i, 1) }

func (c *ccall) argBytes(i int, blob C.int) []byte {
	t := C.wk_arg_text(c.argv, C.int(i), blob)
	switch {
	case t.p == nil:
		return nil
	case t.n == 0:
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(t.p)), t.n)
}

func (c *ccall) limit(id int) int {
	return int(C.sqlite3_limit(C.sqlite3_context_db_handle((*C.sqlite3_context)(c.ctx)), C.int(id), -1))
}

func (c *ccall) resultInt(n int64) {
	C.sqlite3_result_int64((*C.sqlite3_context)(c.ctx), C.sqlite3_int64(n))
}

// resultText passes Go memory: SQLITE_TRANSIENT copies it before the call
// returns.
func (c *ccall) resultText(b []byte) {
	C.wk_result_text(c.ctx, (*C.char)(unsafe.Pointer(unsafe.SliceData(b))), C.sqlite3_uint64(len(b)))
}

func (c *ccall) resultError(code int, msg string) {
	ctx := (*C.sqlite3_context)(c.ctx)
	if msg != "" {
		z := C.CString(msg)
		C.sqlite3_result_error(ctx, z, -1)
		C.free(unsafe.Pointer(z))
	}
	C.sqlite3_result_error_code(ctx, C.int(code))
}

func (c *ccall) stop() bool { return c.progress() }

func (c *cconn) interrupt() { C.sqlite3_interrupt(c.db) }

func (c *cconn) configure(op int, on bool) error {
	v := C.int(0)
	if on {
		v = 1
	}
	if rc := C.wk_db_config(c.db, C.int(op), v); rc != 0 {
		return c.err(rc)
	}
	return nil
}

func (c *cconn) setLimit(id, value int) { C.sqlite3_limit(c.db, C.int(id), C.int(value)) }

func (c *cconn) inTx() bool { return C.sqlite3_get_autocommit(c.db) == 0 }

func (c *cconn) changes() int64 { return int64(C.sqlite3_changes64(c.db)) }

func (c *cconn) pagesWritten() int64 { return int64(C.wk_cache_writes(c.db)) }

// rest: C runs on the calling thread's own stack; nothing to give back.
func (c *cconn) rest() {}

func (c *cconn) close() error {
	var err error
	if rc := C.sqlite3_close_v2(c.db); rc != 0 {
		err = c.err(rc)
	}
	connClosed()
	// After the close: SQLite calls no hook once the connection is gone,
	// and a hook called with a deleted handle would panic inside C.
	if c.hooks != 0 {
		c.hooks.Delete()
		c.hooks = 0
	}
	for _, h := range c.funcs {
		h.Delete()
	}
	c.funcs = nil
	c.db = nil
	return err
}

func (s *cstmt) params() int { return int(C.sqlite3_bind_parameter_count(s.p)) }

func (s *cstmt) readonly() bool { return C.sqlite3_stmt_readonly(s.p) != 0 }

func (s *cstmt) bind(i int, v abi.Value) error {
	idx := C.int(i)
	var rc C.int
	switch v.Kind {
	case abi.KindInteger:
		rc = C.sqlite3_bind_int64(s.p, idx, C.sqlite3_int64(v.Int))
	case abi.KindReal:
		rc = C.sqlite3_bind_double(s.p, idx, C.double(v.Float))
	case abi.KindText:
		rc = C.wk_bind_text(s.p, idx, (*C.char)(unsafe.Pointer(unsafe.SliceData(v.Bytes))), C.sqlite3_uint64(len(v.Bytes)))
	case abi.KindBlob:
		rc = C.wk_bind_blob(s.p, idx, unsafe.Pointer(unsafe.SliceData(v.Bytes)), C.sqlite3_uint64(len(v.Bytes)))
	default: // KindNull; the caller has refused unknown kinds
		rc = C.sqlite3_bind_null(s.p, idx)
	}
	if rc != 0 {
		return s.c.err(rc)
	}
	return nil
}

func (s *cstmt) step() (bool, error) {
	switch rc := C.sqlite3_step(s.p); rc {
	case 100: // SQLITE_ROW
		return true, nil
	case 101: // SQLITE_DONE
		return false, nil
	default:
		return false, s.c.err(rc)
	}
}

func (s *cstmt) columns() int { return int(C.sqlite3_column_count(s.p)) }

func (s *cstmt) columnName(i int) []byte {
	t := C.wk_column_name(s.p, C.int(i))
	if t.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(t.p)), t.n)
}

func (s *cstmt) column(i int) abi.Value {
	v := C.wk_column(s.p, C.int(i))
	switch v._type {
	case 1:
		return abi.Value{Kind: abi.KindInteger, Int: int64(v.i)}
	case 2:
		return abi.Value{Kind: abi.KindReal, Float: float64(v.f)}
	case 3:
		return abi.Value{Kind: abi.KindText, Bytes: cview(v.p, v.n)}
	case 4:
		return abi.Value{Kind: abi.KindBlob, Bytes: cview(v.p, v.n)}
	}
	return abi.Value{Kind: abi.KindNull}
}

// cview is a view of n bytes of SQLite's memory at p, valid until the
// statement's next step, reset or finalize.
func cview(p unsafe.Pointer, n C.int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

func (s *cstmt) reset() { C.sqlite3_reset(s.p) }

func (s *cstmt) finalize() { C.sqlite3_finalize(s.p) }
